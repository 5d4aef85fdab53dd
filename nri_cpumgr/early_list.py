"""The pod spec watch's first LIST, made at the plugin's start by a child process (issue 34).

Why: a plugin started on a node whose Guaranteed containers its state does not know (a first
start, a lost state) answers its first Synchronize only with their pods' spec facts
(:meth:`nri_cpumgr.runtime.plugin.NRIPlugin._with_pod_specs`), so it waits for the watch's
first LIST. Made in the plugin's thread, that LIST costs 35-55 ms of the process's one
interpreter lock (``http.client``, ``ssl`` and ``email`` imported, the pages decoded, 2-CPU
VM) on top of the plugin's own start, which needs the same lock: launch -> synchronized
went from ~80 ms to ~150 ms. A child forked before the plugin is imported makes the LIST
on another CPU meanwhile and hands over only what :func:`~nri_cpumgr.podmodel.spec.
facts_from_pod` reads (:func:`~nri_cpumgr.podsource.facts_parts`, one :mod:`marshal`
document on a pipe); the watch thread reads it when its first LIST is due and then watches
from its resourceVersion, as after a LIST of its own; when it lacks one of the first
Synchronize's Guaranteed pods (created since), the watch lists again
(:meth:`nri_cpumgr.podsource.APIServerPodSource.refresh`).

:func:`start` (called by :mod:`nri_cpumgr.boot` with the config file's ``apiServerURL`` and
``nodeName`` as written) forks a child running :func:`nri_cpumgr.podsource.list_to`;
:func:`take` hands the child to the watch whose validated config has the same two values,
once; :func:`read` collects its answer. Whatever goes wrong with the child (it fails, says
something unreadable, takes longer than :data:`DEADLINE`, was started for other values)
only means the watch makes its first LIST itself, as without it, and logs what that LIST
meets; a child the validated config has no use for is stopped (:func:`drop`). The child
never logs, puts ``/dev/null`` on its standard descriptors and closes every other one but
its pipe, dies with the plugin's process (``PR_SET_PDEATHSIG``), and leaves with
``os._exit``; the plugin reaps it.

Only :mod:`os` and builtins at import: :mod:`nri_cpumgr.boot` imports this at the start.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

#: Seconds the watch waits for the child's answer (from when it first looks) before it
#: gives up on it and lists itself (the child's requests have 2 s deadlines each).
DEADLINE = 5.0

#: The child: (pid, read end of its pipe, apiServerURL, nodeName as the config file gives).
_child: tuple[int, int, str, str] | None = None


def start(url: str, node: str, job: Callable[[int], int]) -> bool:
    """Fork the child making the LIST of node ``node``'s pods at ``url`` (the config's
    ``apiServerURL`` and ``nodeName``, "" for their defaults, as
    :class:`nri_cpumgr.podsource.APIServerPodSource` takes them): ``job(fd)`` in the child
    writes its document on ``fd`` and gives the child's exit status
    (:func:`nri_cpumgr.podsource.list_to`). False when the fork fails (nothing started).
    Call before any thread is started."""
    global _child
    parent = os.getpid()
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return False
    if pid == 0:  # the child
        code = 1
        try:
            os.close(r)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):  # (a caller waiting for the plugin's output: not for this)
                os.dup2(null, fd)
            os.closerange(3, w)
            os.closerange(w + 1, 1 << 16)
            _die_with(parent)
            code = job(w)
        finally:
            os._exit(code)
    os.close(w)
    _child = (pid, r, url, node)
    return True


def _die_with(parent: int) -> None:
    """The child: killed when the plugin's process ends (``PR_SET_PDEATHSIG``: the thread
    that forked it is the main thread, which lives as long as the process); gone at once
    when it has ended already."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def drop() -> None:
    """Stop and reap a child nobody will take (the validated config has no pod spec watch
    of the API server)."""
    global _child
    child, _child = _child, None
    if child is not None:
        discard(child[0], child[1])


def take(url: str, node: str) -> tuple[int, int] | None:
    """The child, ``(pid, read fd)``, when it was started for ``url`` and ``node`` (the
    validated config's ``apiServerURL`` and ``nodeName``); None when none was. A child
    started for other values is stopped and reaped. Once: the child belongs to the caller
    (who calls :func:`read`)."""
    global _child
    child, _child = _child, None
    if child is None:
        return None
    pid, fd, *values = child
    if values != [url, node]:
        discard(pid, fd)
        return None
    return pid, fd


def read(pid: int, fd: int, deadline: float = DEADLINE) -> tuple[dict[str, Any] | None, float]:
    """Collect the child ``(pid, fd)`` of :func:`take`: its document (decoded; None
    when it failed, said nothing readable or took longer than ``deadline`` seconds) and
    the child's CPU time in ms as it says it (its ``cpu_ms``, taken out of the document; 0
    when it says none). The document has ``items`` and ``resourceVersion``, or ``error``
    (what the child's LIST met). Closes ``fd`` and reaps the child (``waitpid``:
    ``os.wait4``'s usage would import ``resource``, a shared library, on the first
    Synchronize's path)."""
    import marshal
    import select
    import time

    chunks: list[bytes] = []
    end = time.monotonic() + deadline
    done = False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while (left := end - time.monotonic()) > 0:
            if not poller.poll(left * 1000):
                break
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                done = True
                break
            chunks.append(chunk)
    except OSError:
        pass
    if not done:
        discard(pid, fd)
        return None, 0.0
    os.close(fd)
    _reap(pid)
    try:
        doc = marshal.loads(b"".join(chunks))
    except (ValueError, EOFError, TypeError):
        return None, 0.0
    if not isinstance(doc, dict):
        return None, 0.0
    ms = doc.pop("cpu_ms", 0.0)  # (a number of ms below a day, else none)
    ms = float(ms) if type(ms) in (int, float) and 0 <= ms < 86_400_000 else 0.0
    if isinstance(doc.get("error"), str) or (
            isinstance(doc.get("items"), list)
            and isinstance(doc.get("resourceVersion"), str)):
        return doc, ms
    return None, ms


def discard(pid: int, fd: int) -> None:
    """Stop and reap the child ``(pid, fd)`` of :func:`take` without reading it."""
    import signal

    try:
        os.close(fd)
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    _reap(pid)


def _reap(pid: int) -> None:
    """Wait for the child ``pid`` (nothing when it was reaped already)."""
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
