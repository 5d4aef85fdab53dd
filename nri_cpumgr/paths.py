"""Path text as :mod:`pathlib` spells it, without importing pathlib (issue 34: pathlib, with
the ``urllib.parse`` and ``ipaddress`` it imports, costs ~3 ms of CPU at the plugin's start,
before its first Synchronize answer). The files the start opens (the config file, the state
files, sysfs attributes) are handled as strings; :class:`pathlib.Path` stays the type of the
public attributes and return values, made when first asked for."""

from __future__ import annotations

import errno
import os
import stat

#: errno values ``pathlib`` reads as "not there" (``Path.exists``/``is_file`` are False for
#: them and raise for any other error)
ABSENT = frozenset((errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP))


def normal(path: str | os.PathLike[str]) -> str:
    """``str(pathlib.Path(path))``: the same text (repeated and trailing slashes and ``.``
    components dropped, ``..`` kept). pathlib is imported only for a path not already in
    that form."""
    text = os.fspath(path)
    if (text and "//" not in text and "/./" not in text and not text.startswith("./")
            and not text.endswith(("/", "/."))):
        return text
    from pathlib import Path

    return str(Path(text))


def _stat(path: str) -> os.stat_result | None:
    """``os.stat(path)``, None when it is not there (:data:`ABSENT`) or ``path`` holds a
    NUL (as pathlib's predicates read them); OSError for another failure."""
    try:
        return os.stat(path)
    except OSError as e:
        if e.errno not in ABSENT:
            raise
        return None
    except ValueError:
        return None


def is_file(path: str) -> bool:
    """``pathlib.Path(path).is_file()``: a regular file (symlinks followed); False when it
    is not there (:data:`ABSENT`) or ``path`` holds a NUL, OSError for another failure."""
    st = _stat(path)
    return st is not None and stat.S_ISREG(st.st_mode)


def exists(path: str) -> bool:
    """``pathlib.Path(path).exists()``: False when it is not there (:data:`ABSENT`) or
    ``path`` holds a NUL, OSError for another failure."""
    return _stat(path) is not None
