"""``nri-cpumgr enable-nri``: turn NRI on in the runtime's configuration on this node if it is
off, then restart the runtime (only when something changed); ``--dry-run`` prints the diff and
changes nothing. Run by the chart's opt-in ``nodePreparation`` init container with the host's
configuration directory mounted and the host's PID namespace (the restart runs
``--restart-command`` in it, by default through ``nsenter`` into PID 1's namespaces). The
file is the runtime's default or ``--config``: an absolute path is the host's, read under
``--host-root``; a relative one the working directory's (:func:`config_file`).
"NRI on" includes accepting externally started plugins (``disable_connections`` /
``nri_disable_connections`` not ``true``: see :mod:`nri_cpumgr.nodeprep`). When the runtime's
NRI socket (containerd's ``socket_path``, CRI-O's ``nri_listen``) is not the plugin's
``--socket-path``, a warning line on stderr names both (the exit status stays as it is).

Exit status: 0 (NRI on, changed or not), 2 (the configuration cannot be read, edited or
written: not TOML, not UTF-8, not a regular file, a form the edit cannot change, a later CRI-O
drop-in that turns NRI off, a directory it cannot write in; or no ``--host-root``, or a
``--restart-command``/``--version-command`` that is no command line, an unclosed quote: nothing
written, nothing restarted), 3 (the file was written but the restart failed or could not be
run: restart the runtime by hand)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# the edits, subprocess and tempfile are imported by the command itself: add_parser runs for
# every command line, `run` included, whose start is measured (test_early_registration.py)

DEFAULTS = {
    "containerd": ("/etc/containerd/config.toml", "systemctl restart containerd"),
    "crio": ("/etc/crio/crio.conf.d/90-nri.conf", "systemctl restart crio"),
}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    e = sub.add_parser("enable-nri", help="turn NRI on in the runtime's configuration if off "
                                          "and restart the runtime (--dry-run: print the diff)")
    e.add_argument("--runtime", choices=sorted(DEFAULTS), required=True,
                   help="the runtime whose configuration to edit")
    e.add_argument("--config",
                   help="the file to edit (containerd: config.toml; CRI-O: the drop-in to "
                   "write); default per runtime (/etc/containerd/config.toml, "
                   "/etc/crio/crio.conf.d/90-nri.conf). An absolute path is the host's, "
                   "looked up under --host-root; a relative one is taken from the working "
                   "directory as it is, like any --config of nri-cpumgr (a copy to try "
                   "--dry-run on)")
    e.add_argument("--host-root", default="/",
                   help="where the host's filesystem is mounted (the init container's /host): "
                   "the default --config and an absolute --config are read under it")
    e.add_argument("--restart-command",
                   help="run after a change (default: nsenter -t 1 -m -u -i -n -p -- systemctl "
                        "restart containerd|crio); empty: do not restart")
    e.add_argument("--version-command",
                   help="containerd without a config.toml: the command that prints its "
                        "version (default: nsenter -t 1 -m -u -i -n -p -- containerd "
                        "--version); 2.x has NRI on by default (nothing to do), 1.7 off (a "
                        "config.toml with NRI on is written); unknown: nothing written, "
                        "status 2")
    e.add_argument("--dry-run", action="store_true", help="print the diff, change nothing")
    e.add_argument("--socket-path",
                   help="the plugin's socketPath (default: its default, /var/run/nri/nri.sock): "
                        "a warning names both when the runtime's NRI socket differs")
    e.set_defaults(func=cmd_enable_nri)


def cmd_enable_nri(args: argparse.Namespace) -> int:
    import subprocess

    from . import (
        DEFAULT_SOCKET,
        V1_TABLE,
        NodePrepError,
        containerd_config,
        containerd_socket,
        crio_closes,
        crio_dropin,
        crio_nri,
        crio_socket,
        diff,
        ignored_table,
        same_socket,
    )

    default_path, default_restart = DEFAULTS[args.runtime]
    if not Path(args.host_root).is_dir():
        print(f"nri-cpumgr enable-nri: no host root {args.host_root} (not a directory): "
              f"nothing written, nothing restarted", file=sys.stderr)
        return 2
    restart = args.restart_command
    if restart is None:
        restart = "nsenter -t 1 -m -u -i -n -p -- " + default_restart
    try:  # both parsed before anything is written: a typo must not leave a file behind
        restart_argv = _split_command("--restart-command", restart)
        _split_command("--version-command", args.version_command or "")
    except NodePrepError as e:
        print(f"nri-cpumgr enable-nri: {e}: nothing written, nothing restarted",
              file=sys.stderr)
        return 2
    path = config_file(args.config or default_path, args.host_root)
    try:
        if args.runtime == "containerd":  # (CRI-O's drop-in: its directory's siblings count)
            path = follow_links(path, args.host_root if (args.config or default_path)
                                .startswith("/") else "/")
        old = _read(path)
        if args.runtime == "containerd":
            if old is None:
                version = _containerd_version(args.version_command)
                if not version[0].isdigit():
                    raise NodePrepError(
                        f"no such file and containerd's version is unknown ({version}): its "
                        f"defaults have NRI on in 2.x, off in 1.7; nothing written (write a "
                        f"config.toml, or check --version-command)")
                if int(version.split(".")[0]) >= 2:
                    print(f"enable-nri: no {path}: containerd {version} runs its defaults, "
                          f"NRI on: nothing to do")
                    return 0
                print(f"nri-cpumgr enable-nri: no {path}: containerd {version} runs its "
                      f"defaults, NRI off: write one with NRI on", file=sys.stderr)
            if old is not None and (ignored := ignored_table(old)):
                print(f"nri-cpumgr enable-nri: warning: {path} is a version-1 config (no "
                      f"version line): containerd 1.7 ignores [{ignored}] in it and reads "
                      f"[{V1_TABLE}]", file=sys.stderr)
            new = containerd_config(old or "")
            runtime_socket: str | None = containerd_socket(new)
            where = f"socket_path in {path}"
        else:
            if old is not None:
                crio_nri(old)  # ours, not TOML: refused like containerd's config
            before, after = _crio_siblings(path)
            closing = [name for name, text in after if crio_closes(text)]
            if closing:
                raise NodePrepError(
                    f"{', '.join(str(path.parent / n) for n in closing)} comes after "
                    f"{path.name} and turns NRI off or closes it to external plugins "
                    f"(enable_nri = false / nri_disable_connections = true): it wins, so "
                    f"nothing is written or restarted; change it by hand")
            new = crio_dropin(old, [t for _, t in before + after])
            runtime_socket = crio_socket([t for _, t in before] + [new] + [t for _, t in after])
            where = f"nri_listen in {path.parent}/*.conf"
            if runtime_socket is None:
                runtime_socket, where = DEFAULT_SOCKET, ("CRI-O's default: no drop-in sets "
                                                   "nri_listen, /etc/crio/crio.conf may")
    except NodePrepError as e:
        print(f"nri-cpumgr enable-nri: {path}: {e}", file=sys.stderr)
        return 2
    plugin_socket = args.socket_path or DEFAULT_SOCKET
    if not same_socket(runtime_socket, plugin_socket):
        print(f"nri-cpumgr enable-nri: warning: the runtime's NRI socket is {runtime_socket} "
              f"({where}) but the plugin's socketPath is {plugin_socket}: the plugin cannot "
              f"connect until one names the other's path", file=sys.stderr)
    if new == old:
        print(f"enable-nri: NRI is on in {path}: nothing to do")
        return 0
    print(diff(str(path), old or "", new), end="")
    if args.dry_run:
        print(f"enable-nri: dry run: {path} not changed, {args.runtime} not restarted")
        return 0
    try:
        _write_atomically(path, new)
    except OSError as e:
        print(f"nri-cpumgr enable-nri: {path}: cannot write it: {e.strerror or e}: nothing "
              f"written, nothing restarted", file=sys.stderr)
        return 2
    if not restart_argv:
        print(f"enable-nri: wrote {path}; not restarting {args.runtime} (empty command)")
        return 0
    try:
        r = subprocess.run(restart_argv, capture_output=True, text=True)
    except OSError as e:
        print(f"nri-cpumgr enable-nri: wrote {path}, but {restart!r} could not run: "
              f"{e.strerror or e}; restart {args.runtime} by hand", file=sys.stderr)
        return 3
    if r.returncode != 0:
        print(f"nri-cpumgr enable-nri: {restart!r} failed ({r.returncode}): "
              f"{(r.stderr or r.stdout).strip()}", file=sys.stderr)
        return 3
    print(f"enable-nri: wrote {path}; restarted {args.runtime}")
    return 0


def _containerd_version(command: str | None) -> str | None:
    """containerd's version (``2.1.9``, ``1.7.24``) from ``command``'s output
    (``containerd github.com/containerd/containerd/v2 2.1.9+unknown``; default: ``containerd
    --version`` in PID 1's namespaces, the host's in the init container), or a reason it is
    unknown (not starting with a digit: the command failed or printed no version)."""
    import re
    import shlex
    import subprocess

    if command is None:
        command = "nsenter -t 1 -m -u -i -n -p -- containerd --version"
    if not command:
        return "--version-command is empty"
    try:
        r = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=30)
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return f"{command!r}: {e}"
    if r.returncode != 0:
        return f"{command!r} failed ({r.returncode})"
    for word in r.stdout.split()[2:] or r.stdout.split():
        m = re.match(r"^v?(\d+\.\d+(\.\d+)?)", word)
        if m:
            return m.group(1)
    return f"{command!r} printed {r.stdout.strip()[:80]!r}"


def _split_command(option: str, command: str) -> list[str]:
    """``command`` split as a shell splits it (``shlex.split``; ``""`` gives ``[]``), or
    :class:`NodePrepError` naming ``option`` when it is no command line (an unclosed quote,
    a trailing backslash), so that the command is refused before a file is written."""
    import shlex

    from . import NodePrepError

    try:
        return shlex.split(command)
    except ValueError as e:
        raise NodePrepError(f"{option} {command!r} is not a command line ({e})") from None


def config_file(given: str, host_root: str) -> Path:
    """The file ``--config`` names: an absolute path is the host's, under ``host_root``
    (``/etc/containerd/config.toml`` with ``--host-root /host``:
    ``/host/etc/containerd/config.toml``); a relative one is the working directory's, as it
    is (as every ``--config`` of nri-cpumgr and the shell read one: on the node, with the
    default ``--host-root /``, both are what they say)."""
    if not given.startswith("/"):
        return Path.cwd() / given
    return Path(host_root) / given.lstrip("/")


def follow_links(path: Path, root: str) -> Path:
    """``path`` with its symbolic links followed as the host follows them: an absolute
    target is the host's, looked up under ``root`` (``--host-root``: the init container's
    ``/host``), a relative one beside the link. The file the runtime reads, so the one to
    read and edit: writing over the link would replace it with a file and leave the file it
    names as it was; and an absolute target read in the container names the container's
    file, not the host's. :class:`NodePrepError` after 40 links (the kernel's limit), and
    for a link whose file is not there (outside the host's directories the container
    mounts, or dangling): never taken for "no config.toml", whose defaults it would write."""
    import os

    from . import NodePrepError

    link = path
    for _ in range(40):
        if not path.is_symlink():
            if path != link and not path.exists():
                raise NodePrepError(f"a symbolic link to {path}, which is not there: nothing "
                                    "written (edit the file it names by hand)")
            return path
        target = os.readlink(path)
        path = Path(root) / target.lstrip("/") if target.startswith("/") else \
            path.parent / target
    raise NodePrepError("more than 40 symbolic links: nothing written")


def _read(path: Path) -> str | None:
    """``path``'s text, None when there is no such file; :class:`NodePrepError` when it is
    not a regular file or not UTF-8 text (TOML is UTF-8) or cannot be read."""
    from . import NodePrepError

    if not path.exists() and not path.is_symlink():
        return None
    if not path.is_file():
        what = "a symbolic link to nothing" if path.is_symlink() else \
            "not a regular file (a directory?)"
        raise NodePrepError(f"{what}: nothing written")
    try:
        return path.read_bytes().decode()
    except UnicodeDecodeError as e:
        raise NodePrepError(f"not UTF-8 text (byte {e.object[e.start]:#04x} at offset "
                            f"{e.start}): TOML is UTF-8; nothing written") from None
    except OSError as e:
        raise NodePrepError(f"cannot read it: {e.strerror or e}") from None


def _crio_siblings(path: Path) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The other ``*.conf`` drop-ins in ``path``'s directory as (name, text), split into those
    CRI-O reads before ``path`` and after it (by file name; a later one overrides a key).
    :class:`NodePrepError` when one cannot be read (not UTF-8)."""
    from . import NodePrepError

    before: list[tuple[str, str]] = []
    after: list[tuple[str, str]] = []
    if not path.parent.is_dir():
        return before, after
    for f in sorted(path.parent.glob("*.conf")):
        if f.name == path.name or not f.is_file():
            continue
        try:
            text = _read(f) or ""
        except NodePrepError as e:
            raise NodePrepError(f"{f}: {e}") from None
        (before if f.name < path.name else after).append((f.name, text))
    return before, after


def _write_atomically(path: Path, text: str) -> None:
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
