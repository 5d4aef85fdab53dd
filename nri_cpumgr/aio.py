"""``asyncio`` for the plugin's own modules, without importing it before it is needed.

The plugin answers the runtime's first requests (Configure, Synchronize) on a blocking socket
before asyncio is imported (~40-60 ms with what it loads: issue 34, launch -> synchronized;
:mod:`nri_cpumgr.transport.firstreqs`). The handlers that run then schedule work the way they
do on the event loop (``get_running_loop().call_soon`` / ``call_later`` / ``create_task``).
Modules imported by the build take this module as their ``asyncio``
(``from nri_cpumgr import aio as asyncio``): :func:`get_running_loop` gives the running event
loop, else the :class:`PreLoop` of the blocking session while it runs, else raises
RuntimeError as asyncio's does; every other name is asyncio's own, imported at first use.

A :class:`PreLoop` runs ``call_soon`` callbacks when its owner calls :meth:`PreLoop.run_ready`
(after each answer is written, as the event loop runs them after the protocol's
``data_received``), and keeps ``call_later`` timers and ``create_task`` coroutines for the
event loop: :meth:`PreLoop.transfer` hands them over once it runs (a timer keeps its due time).
"""

from __future__ import annotations

import sys
import time
from _thread import get_ident

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine
    from typing import Any

#: The blocking session's scheduler while it serves, and its thread (see :func:`active`).
_preloop: PreLoop | None = None
_preloop_thread = 0


def running_loop() -> Any:
    """The event loop running in this thread, or None; asyncio is not imported for it (None
    also while another thread is still importing it: no loop runs here before it is)."""
    events = sys.modules.get("asyncio.events")
    get = getattr(events, "_get_running_loop", None)
    return get() if get is not None else None


def get_running_loop() -> Any:
    """The running event loop of this thread; else the active :class:`PreLoop`; else raises
    RuntimeError ("no running event loop", as :func:`asyncio.get_running_loop`)."""
    loop = running_loop()
    if loop is not None:
        return loop
    if _preloop is not None and _preloop_thread == get_ident():
        return _preloop
    raise RuntimeError("no running event loop")


class _NoSSL:
    """A meta path finder refusing ``ssl`` to the imports of one thread (asyncio's own
    ``try: import ssl`` then goes without it); other threads import it as usual."""

    def __init__(self) -> None:
        self.thread = get_ident()

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "ssl" and get_ident() == self.thread:
            raise ModuleNotFoundError("ssl is not loaded for asyncio (nri_cpumgr.aio)",
                                      name="ssl")
        return None


def import_asyncio() -> Any:
    """asyncio, imported without ssl when ssl is not loaded yet: the plugin speaks no TLS,
    asyncio imports ssl only if it can, and OpenSSL costs ~4.5 MiB of RSS and ~7 ms at start.
    Only this thread's import of ssl is refused, and only during this import: another
    thread (the pod spec watch's HTTPS client) imports it as usual meanwhile, and importers
    after this one get the real module. Also for grpcio, whose import loads asyncio."""
    if "asyncio" in sys.modules:
        import asyncio  # (imported, or being imported by another thread: waited for)

        return asyncio
    finder = _NoSSL()
    sys.meta_path.insert(0, finder)
    try:
        import asyncio
    finally:
        sys.meta_path.remove(finder)
    return asyncio


def __getattr__(name: str) -> Any:
    import asyncio

    return getattr(asyncio, name)


class _Handle:
    """A :class:`PreLoop` callback or timer; :meth:`cancel` also cancels the event loop's
    handle it became."""

    __slots__ = ("args", "callback", "cancelled", "real", "when")

    def __init__(self, when: float | None, callback: Callable[..., object],
                 args: tuple[object, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False
        self.real: Any = None

    def cancel(self) -> None:
        self.cancelled = True
        if self.real is not None:
            self.real.cancel()


class _PendingTask:
    """A coroutine :meth:`PreLoop.create_task` keeps for the event loop (``task`` once
    there)."""

    def __init__(self, coro: Coroutine[Any, Any, Any], name: str | None) -> None:
        self.coro = coro
        self.name = name
        self.task: Any = None
        self.cancelled = False

    def done(self) -> bool:
        return self.task.done() if self.task is not None else self.cancelled

    def cancel(self) -> bool:
        if self.task is not None:
            return self.task.cancel()
        self.cancelled = True
        self.coro.close()
        return True


class PreLoop:
    """The part of an event loop's interface the handlers use, before the event loop runs:
    ``call_soon``, ``call_later``, ``call_at``, ``create_task``, ``time`` (module doc).
    ``time()`` is :func:`time.monotonic`, as the event loop's."""

    def __init__(self) -> None:
        self._ready: list[_Handle] = []
        self._timers: list[_Handle] = []
        self._tasks: list[_PendingTask] = []

    def time(self) -> float:
        return time.monotonic()

    def call_soon(self, callback: Callable[..., object], *args: object,
                  context: object = None) -> _Handle:
        h = _Handle(None, callback, args)
        self._ready.append(h)
        return h

    def call_at(self, when: float, callback: Callable[..., object], *args: object,
                context: object = None) -> _Handle:
        h = _Handle(when, callback, args)
        self._timers.append(h)
        return h

    def call_later(self, delay: float, callback: Callable[..., object], *args: object,
                   context: object = None) -> _Handle:
        return self.call_at(time.monotonic() + delay, callback, *args)

    def create_task(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None,
                    context: object = None) -> _PendingTask:
        t = _PendingTask(coro, name)
        self._tasks.append(t)
        return t

    def run_ready(self) -> None:
        """Run the ``call_soon`` callbacks, those they add too, in order (one that raises is
        reported to ``sys.excepthook``'s logger as the event loop's handler would: logged,
        the rest still runs)."""
        while self._ready:
            batch, self._ready = self._ready, []
            for h in batch:
                if h.cancelled:
                    continue
                try:
                    h.callback(*h.args)
                except Exception:  # noqa: BLE001 - as the event loop: log, keep going
                    import logging

                    logging.getLogger("asyncio").exception(
                        "Exception in callback %r", h.callback)

    def transfer(self, loop: Any) -> None:
        """Hand what is left to the running event loop ``loop``: callbacks not run yet (first),
        timers (at their due time), tasks (created now, in order)."""
        ready, self._ready = self._ready, []
        timers, self._timers = self._timers, []
        tasks, self._tasks = self._tasks, []
        for h in ready:
            if not h.cancelled:
                h.real = loop.call_soon(h.callback, *h.args)
        for h in timers:
            if not h.cancelled:
                h.real = loop.call_at(h.when, h.callback, *h.args)
        for t in tasks:
            if not t.cancelled:
                t.task = loop.create_task(t.coro, name=t.name)

    def pending(self) -> int:
        """How many callbacks, timers and tasks wait for the event loop."""
        return (sum(not h.cancelled for h in self._ready + self._timers)
                + sum(not t.cancelled for t in self._tasks))


class active:  # noqa: N801 - used as a context manager, as contextlib's
    """``with active(pre):`` makes ``pre`` what :func:`get_running_loop` gives in this thread
    (when no event loop runs in it) for the block; other threads (the checkpoint writer, the
    pod spec watch) still get RuntimeError."""

    def __init__(self, pre: PreLoop) -> None:
        self.pre = pre

    def __enter__(self) -> PreLoop:
        global _preloop, _preloop_thread
        self._saved = _preloop, _preloop_thread
        _preloop, _preloop_thread = self.pre, get_ident()
        return self.pre

    def __exit__(self, *exc: object) -> None:
        global _preloop, _preloop_thread
        _preloop, _preloop_thread = self._saved
