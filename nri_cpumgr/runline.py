"""A ``run`` command line read without argparse (issue 34: argparse and its imports are ~5
ms of the plugin's start): the options the ``run`` parser of :func:`nri_cpumgr.cli.build_parser`
takes, as written. Used by :mod:`nri_cpumgr.boot` (the early registration) and
:func:`nri_cpumgr.cli.parse_args`; imports nothing."""

from __future__ import annotations

#: the ``run`` parser's options with a value -> their destination, and its defaults
_OPTIONS_WITH_VALUE = {"--config": "config", "--socket": "socket", "--state-dir": "state_dir",
                       "--sysfs-root": "sysfs_root"}
_RUN_DEFAULTS: dict[str, str | bool | None] = {
    "config": None, "socket": None, "state_dir": None, "sysfs_root": "/", "verbose": False,
    "check_config": False}  # (--check-config itself goes to argparse: not the plugin's start)
_FLAGS = ("-v", "--verbose")


def run_arguments(argv: list[str]) -> dict[str, str | bool | None] | None:
    """A ``run`` command line (``argv`` without the program) as the ``run`` parser of
    :func:`nri_cpumgr.cli.build_parser` reads it: every option's value by its destination
    (``config``, ``socket``, ``state_dir``, ``sysfs_root``, ``verbose``, ``check_config``
    always False; the parser's
    defaults for those not given, the last one given otherwise); None unless every argument
    is one that parser takes as written (``--opt VALUE`` with a VALUE not starting with
    '-', ``--opt=VALUE``, ``-v``, ``--verbose``): anything else (an abbreviation, ``-h``,
    a missing value, a stray argument, a relative ``--socket`` or ``--state-dir``) is left to
    argparse and its messages."""
    if argv[:1] != ["run"]:
        return None
    out: dict[str, str | bool | None] = dict(_RUN_DEFAULTS)
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg in _FLAGS:
            out["verbose"] = True
            i += 1
            continue
        opt, eq, value = arg.partition("=")
        if opt not in _OPTIONS_WITH_VALUE:
            return None
        if not eq:
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        out[_OPTIONS_WITH_VALUE[opt]] = value
    socket = out["socket"]
    if isinstance(socket, str) and not socket.startswith("/"):
        return None  # (a relative --socket: argparse refuses it, with the reason)
    state_dir = out["state_dir"]
    if isinstance(state_dir, str) and state_dir and not state_dir.startswith("/"):
        return None  # (a relative --state-dir: the same)
    return out
