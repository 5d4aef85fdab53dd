"""The NRI plugin stub: connection, registration, request dispatch and reconnection.

Protocol facts (containerd/nri pkg/stub, pkg/adaptation; /work/shared/docs/nri-protocol.md):

* external mode: dial the runtime's socket (default ``/var/run/nri/nri.sock``); on EOF or
  ECONNREFUSED reconnect with exponential backoff, the state being rebuilt from the next
  Synchronize. Launched mode (the runtime started us, socket on fd ``NRI_PLUGIN_SOCKET``):
  one session, then :meth:`Stub.run` returns.
* conn 1 serves the Plugin service; conn 2 carries our RegisterPlugin and UpdateContainers
  calls. Configure can arrive before the RegisterPlugin reply, so conn 1 is served while
  registering. A refused registration leaves the socket open: we close it ourselves.
* Configure answers ``events & 0x7ff`` (NRI v0.6.1 refuses unknown bits), before deferred
  handlers are built: the build and their ``configure`` run right after that reply, before
  the next request is read, while the runtime gathers its Synchronize; a split
  Synchronize (v0.8 ``more``) is answered ``more=true`` without updates per intermediate
  part and the handler sees every pod and container once, with the last part.
* Per-event methods of newer NRI answer Unimplemented (12); the runtime then falls back to
  StateChange.
* Timeouts (NRI v0.8 Configure ``registration_timeout`` / ``request_timeout``, milliseconds;
  absent before v0.8, where the runtime's default is 2 s): the runtime drops a plugin that
  answers a request late, and creates the container without our adjustment. Each handler is
  timed; one that used more than half of the request budget is logged as a WARNING naming the
  method. A split Synchronize runs under one deadline for all its parts (nri v0.8
  pkg/adaptation/plugin.go ``synchronize``), so its parts' times are added up.
* Unsolicited UpdateContainers is never sent from inside a handler (the runtime holds its
  NRI lock while waiting for our answer): it is queued and sent once the reply went out.

Before the event loop: after an early registration, :meth:`Stub.serve_first_requests`
answers Configure and Synchronize on the blocking socket with the same handlers
(:mod:`~nri_cpumgr.transport.firstreqs`), and :meth:`Stub.run` continues that session. This
module imports asyncio, the mux and the ttrpc endpoints only when the event loop needs them
(``aio``: :mod:`nri_cpumgr.aio`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from google.protobuf.message import DecodeError, Message

from nri_cpumgr import aio as asyncio  # (asyncio itself at the first use: see the module doc)
from nri_cpumgr.api import nri_pb2
from nri_cpumgr.transport.wire import (  # noqa: F401 - event_mask re-exported
    INVALID_ARGUMENT,
    PLUGIN_SERVICE,
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE,
    RUNTIME_SERVICE_CONN,
    UNKNOWN,
    EarlyRegistration,
    Handler,
    TtrpcError,
    event_mask,
    launched_from_env,
)

if TYPE_CHECKING:
    import asyncio as _asyncio

    from tenacity import RetryCallState

    from nri_cpumgr.transport.firstreqs import Handover
    from nri_cpumgr.transport.mux import Mux
    from nri_cpumgr.transport.ttrpc import Client

DEFAULT_SOCKET = "/var/run/nri/nri.sock"
#: Event bits NRI v0.6.1 accepts (events 1..11); higher bits make it refuse the plugin.
VALID_EVENTS_V061 = 0x7FF
#: The runtime's per-request timeout when Configure does not say (NRI
#: ``DefaultPluginRequestTimeout``), milliseconds.
DEFAULT_REQUEST_TIMEOUT_MS = 2000

_log = logging.getLogger(__name__)
_M = TypeVar("_M", bound=Message)


#: What the CPU manager needs; no POST_* events (each adds a round trip to every CRI call).
DEFAULT_EVENTS = event_mask(
    nri_pb2.CREATE_CONTAINER,
    nri_pb2.UPDATE_CONTAINER,
    nri_pb2.STOP_CONTAINER,
    nri_pb2.REMOVE_CONTAINER,
    nri_pb2.REMOVE_POD_SANDBOX,
)


class PluginError(Exception):
    """A handler refuses the request; str(exc) reaches the runtime (and the kubelet) as the
    error text (status code 2, Unknown)."""


class Handlers(Protocol):
    """Plugin callbacks: synchronous, called on the event loop, must be fast.

    Each may raise :class:`PluginError` to fail the request with its text. Requests must not
    be kept: copy the fields you need (a request may be megabytes).
    """

    def configure(self, req: nri_pb2.ConfigureRequest) -> None: ...

    def synchronize(
        self, pods: list[nri_pb2.PodSandbox], containers: list[nri_pb2.Container]
    ) -> list[nri_pb2.ContainerUpdate]: ...

    def create_container(
        self, req: nri_pb2.CreateContainerRequest
    ) -> nri_pb2.CreateContainerResponse: ...

    def update_container(
        self, req: nri_pb2.UpdateContainerRequest
    ) -> nri_pb2.UpdateContainerResponse: ...

    def stop_container(
        self, req: nri_pb2.StopContainerRequest
    ) -> nri_pb2.StopContainerResponse: ...

    def state_change(self, req: nri_pb2.StateChangeEvent) -> None: ...

    def disconnected(self) -> None: ...

    # optional: ``defer_after_reply() -> Callable[[], None]``: the stub calls the function
    # it returns after each answer is written (see :meth:`Stub._bind`)


class _BuildFailed(PluginError):
    """The deferred handlers could not be built: :meth:`Stub.run` raises the cause; the
    request that needed them is not answered (the connection is closed)."""


#: How far :meth:`Stub.update_containers` lets its deadline grow on a slow runtime: this
#: many times ``update_timeout`` (10 s -> 160 s).
UPDATE_DEADLINE_GROWTH = 16


class _SessionFailed(Exception):
    """The connection ended before the plugin was registered."""


class _Stopped(Exception):
    pass


class Stub:
    """One NRI plugin instance (see the module docstring for the protocol rules).

    ``name``: plugin name; ``idx``: exactly two digits (invocation order). Give either
    ``socket_path`` (external mode) or ``fd`` (launched mode). ``events``: subscription
    mask sent in the Configure answer (capped to 0x7ff). Times are seconds. Reconnection
    backs off exponentially from ``backoff_initial`` to ``backoff_max``; the backoff starts
    over only after a registered connection lasted ``stable_after`` seconds (a runtime that
    drops us right after registering is not hammered).
    ``handlers`` may be None when ``build_handlers`` is given: the handlers are then built
    by that factory at the first moment they are needed (the runtime's first request, else
    right after registration, else after the first failed connection attempt), so that what
    only they import does not delay the first registration. An exception from the factory
    ends :meth:`run` (it is raised from there). ``early``: a connection on which
    RegisterPlugin was already sent (:func:`~nri_cpumgr.transport.wire.register_early`),
    used as the first connection.
    ``update_timeout``: the deadline of the plugin's own UpdateContainers calls at first,
    also sent as the call's ``timeout_nano`` (see :meth:`update_containers`: it grows on a
    runtime slower than that, up to :data:`UPDATE_DEADLINE_GROWTH` times).
    Raises ValueError for a malformed ``idx`` or neither/both of ``socket_path`` and ``fd``
    or of ``handlers`` and ``build_handlers``.
    """

    def __init__(
        self,
        handlers: Handlers | None,
        *,
        build_handlers: Callable[[], Handlers] | None = None,
        early: EarlyRegistration | None = None,
        name: str,
        idx: str,
        socket_path: str | None = DEFAULT_SOCKET,
        fd: int | None = None,
        events: int = DEFAULT_EVENTS,
        reconnect: bool = True,
        logger: logging.Logger | None = None,
        register_timeout: float = 10.0,
        update_timeout: float = 10.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        stable_after: float = 10.0,
    ) -> None:
        if not (len(idx) == 2 and idx.isascii() and idx.isdigit()):  # [0-9]{2}
            raise ValueError(f"plugin index must be exactly two digits, got {idx!r}")
        if fd is not None:
            socket_path = None
        if socket_path is None and fd is None:
            raise ValueError("need socket_path (external plugin) or fd (launched plugin)")
        if (handlers is None) == (build_handlers is None):
            raise ValueError("need exactly one of handlers and build_handlers")
        self._handlers = handlers
        self._handlers_after: Callable[[], None] | None = None
        self._build_handlers = build_handlers
        self._build_error: BaseException | None = None
        self._early = early
        self.name = name
        self.idx = idx
        self.socket_path = socket_path
        self._fd = fd
        self.events = events
        self._reconnect = reconnect and fd is None
        self._log = logger or _log
        self._register_timeout = register_timeout
        self._update_timeout = update_timeout
        self.update_deadline = update_timeout  # what the next UpdateContainers asks for
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._stable_after = stable_after
        self._stopping = False
        self._stop_event: _asyncio.Event | None = None  # (made on the event loop)
        #: what :meth:`serve_first_requests` left to the event loop, or None
        self._handover: Handover | None = None
        self._mux: Mux | None = None
        self._client: Client | None = None
        self._registered = False
        #: Why a launched plugin's one connection failed before it registered (None: it
        #: did not): the command exits non-zero then.
        self.failed: str | None = None
        self._ever_registered = False
        self._in_handler = False
        self._pending_updates: list[nri_pb2.ContainerUpdate] = []
        self._flush_task: _asyncio.Task[None] | None = None
        self._sync_pods: list[nri_pb2.PodSandbox] = []
        self._sync_containers: list[nri_pb2.Container] = []
        self.runtime_name = ""
        self.runtime_version = ""
        #: From the v0.8 Configure, milliseconds; 0 when the runtime did not say (v0.6.1).
        self.registration_timeout_ms = 0
        self.request_timeout_ms = 0
        self._sync_parts = 0
        self._sync_handler_s = 0.0
        self._sync_bytes = 0  # size of the Synchronize parts received so far
        self._last_payload = 0  # size of the request being handled, bytes
        #: the deferred build and the handlers' Configure, run right after Configure's reply
        #: (:meth:`_configure`), or None
        self._after_configure: Callable[[], None] | None = None
        self.sessions = 0  # connections established so far
        self._methods: dict[tuple[str, str], Handler] = {
            (PLUGIN_SERVICE, "Configure"): self._wrap(
                "Configure", nri_pb2.ConfigureRequest, self._configure),
            (PLUGIN_SERVICE, "Synchronize"): self._wrap(
                "Synchronize", nri_pb2.SynchronizeRequest, self._synchronize),
            (PLUGIN_SERVICE, "Shutdown"): self._wrap("Shutdown", nri_pb2.Empty, self._shutdown),
            (PLUGIN_SERVICE, "StateChange"): self._wrap(
                "StateChange", nri_pb2.StateChangeEvent, self._state_change),
        }
        if handlers is not None:
            self._bind(handlers)
        else:  # until built, the per-container methods build the handlers first
            for method, req_cls, attr in self._PER_CONTAINER:
                self._methods[(PLUGIN_SERVICE, method)] = self._wrap(
                    method, req_cls, self._deferred(attr))

    #: The per-container methods: (NRI method, request class, handler attribute).
    _PER_CONTAINER = (
        ("CreateContainer", nri_pb2.CreateContainerRequest, "create_container"),
        ("UpdateContainer", nri_pb2.UpdateContainerRequest, "update_container"),
        ("StopContainer", nri_pb2.StopContainerRequest, "stop_container"),
    )

    def _bind(self, handlers: Handlers) -> None:
        """Dispatch the per-container methods straight to ``handlers`` (no indirection on
        the hot path)."""
        self._handlers = handlers
        # handlers that keep work for after their answer (metrics, log lines, re-plans):
        # the function that runs it, called right after each answer is written and before
        # the next request is read, so the runtime does not wait for it
        hook = getattr(handlers, "defer_after_reply", None)
        self._handlers_after = hook() if hook is not None else None
        for method, req_cls, attr in self._PER_CONTAINER:
            self._methods[(PLUGIN_SERVICE, method)] = self._wrap(
                method, req_cls, getattr(handlers, attr))

    def _deferred(self, attr: str) -> Callable[[Message], Message | None]:
        def call(req: Message) -> Message | None:
            return getattr(self._ready(), attr)(req)

        return call

    def build_now(self) -> Handlers:
        """Build deferred handlers now (before :meth:`run`), raising what the factory raises:
        for a plugin whose start-up errors must stop it before it connects."""
        try:
            return self._ready()
        except _BuildFailed:
            raise self._build_error from None  # type: ignore[misc]

    def _ready(self) -> Handlers:
        """The handlers, built now if they were deferred. A failed build stops the stub:
        the request fails (Unknown) and :meth:`run` raises the factory's exception."""
        if self._handlers is None:
            if self._build_error is not None:
                raise _BuildFailed(f"the plugin failed to start: {self._build_error}")
            assert self._build_handlers is not None
            try:
                handlers = self._build_handlers()
            except BaseException as exc:
                self._build_error = exc
                self.stop()
                raise _BuildFailed(f"the plugin failed to start: {exc}") from exc
            self._bind(handlers)
        return self._handlers  # type: ignore[return-value]

    @classmethod
    def from_env(cls, handlers: Handlers, **kw: object) -> Stub:
        """A stub for a plugin launched by the runtime: socket fd from ``NRI_PLUGIN_SOCKET``,
        name from ``NRI_PLUGIN_NAME``, index from ``NRI_PLUGIN_IDX``.

        Raises RuntimeError if the variables are missing or malformed.
        """
        fd, name, idx = launched_from_env()
        return cls(handlers, name=name, idx=idx, socket_path=None, fd=fd, **kw)  # type: ignore[arg-type]

    # --- public API -------------------------------------------------------------------------
    @property
    def registered(self) -> bool:
        """True while connected and registered with the runtime."""
        return self._registered

    @property
    def request_budget_ms(self) -> int:
        """The runtime's per-request timeout in milliseconds: Configure's ``request_timeout``
        (NRI v0.8+), else the NRI default of 2000 ms."""
        return self.request_timeout_ms or DEFAULT_REQUEST_TIMEOUT_MS

    def stop(self) -> None:
        """Close the connection and make :meth:`run` return (call on the event loop)."""
        self._stopping = True
        if self._stop_event is not None:
            self._stop_event.set()
        if self._mux is not None:
            self._mux.close()

    def request_update(self, updates: list[nri_pb2.ContainerUpdate]) -> None:
        """Queue an unsolicited UpdateContainers; it is sent after the current handler's reply
        went out (or right away outside a handler). Failures are logged, not raised.
        Updates queued while disconnected are dropped when the connection ends."""
        if not updates:
            return
        self._pending_updates.extend(updates)
        if not self._in_handler:
            self._schedule_flush()

    async def update_containers(self, payload: bytes) -> set[str]:
        """Send one serialized ``UpdateContainersRequest`` now, outside any handler, and
        return the ids of the containers the runtime failed to update. The runtime applies
        the whole call under its NRI lock (containerd ``updateFromPlugin``), so callers keep
        calls small. Raises ConnectionError when not registered (or the connection drops),
        TtrpcError / TimeoutError when the runtime refuses or does not answer in time.

        The deadline (:attr:`update_deadline`, seconds) is the call's ``timeout_nano``, and
        the runtime applies the updates under it: containerd cancels the container updates
        still under way when it passes (its ttrpc server's request context), so a call
        slower than the deadline achieves nothing, and one sent again with the same
        deadline fails again while holding the runtime's NRI lock as long. So the deadline
        doubles after each call without an answer (up to ``UPDATE_DEADLINE_GROWTH`` times
        ``update_timeout``) and comes back down, to 4 times what an answered call took but
        never under ``update_timeout``. Seen: containerd 2.4.2 with runc 1.5.3 in a QEMU
        guest on a loaded machine took 10.5 s for 2 containers, six times in a row, each
        cancelled at 10 s (the shims' answers came 0.6 s later)."""
        client = self._client
        if client is None or not self._registered:
            raise ConnectionError("not registered with the runtime")
        deadline = self.update_deadline
        t0 = time.monotonic()
        try:
            data = await client.call(RUNTIME_SERVICE, "UpdateContainers", payload,
                                     timeout=deadline)
        except TimeoutError:
            self.update_deadline = min(deadline * 2,
                                       self._update_timeout * UPDATE_DEADLINE_GROWTH)
            raise TimeoutError(f"no answer within {deadline:.0f} s (the next call waits up "
                               f"to {self.update_deadline:.0f} s)") from None
        took = time.monotonic() - t0
        self.update_deadline = max(self._update_timeout, min(deadline, 4 * took))
        try:
            failed = nri_pb2.UpdateContainersResponse.FromString(data).failed
        except DecodeError as exc:
            raise TtrpcError(UNKNOWN, f"malformed UpdateContainersResponse: {exc}") from None
        return {u.container_id for u in failed}

    def serve_first_requests(self, wait: float | None = None) -> str:
        """Before the event loop: answer the runtime's Configure and Synchronize on the early
        registration's blocking socket (:mod:`~nri_cpumgr.transport.firstreqs`), then leave
        the session to :meth:`run`, which continues it (the unread bytes, stream ids, the
        registration, a split Synchronize in progress, what the handlers scheduled on a loop).
        Returns why it stopped ("synchronized" when it served both). ``wait``: seconds
        without data from the runtime after which it stops (default
        :data:`~nri_cpumgr.transport.firstreqs.FIRST_REQUEST_WAIT`). Raises ValueError without
        an early registration (launched mode, or one that could not be sent) or when called
        twice."""
        if self._early is None or self._handover is not None or self.sessions:
            raise ValueError("no early registration to serve the first requests on")
        from nri_cpumgr.transport import firstreqs

        kw = {} if wait is None else {"wait": wait}
        self._sync_pods, self._sync_containers = [], []
        self._sync_parts, self._sync_handler_s, self._sync_bytes = 0, 0.0, 0
        self._after_configure = None
        self._handover = firstreqs.serve_first_requests(self, self._early, **kw)
        return self._handover.why

    async def run(self) -> None:
        """Connect, register and serve until :meth:`stop` (external mode reconnects with
        backoff; launched mode returns after its one connection ends). Raises what a
        deferred ``build_handlers`` raised."""
        try:
            await self._run()
        except _BuildFailed:
            pass
        if self._build_error is not None:
            raise self._build_error

    async def _run(self) -> None:
        if not self._reconnect:
            try:
                await self._session()
            except (OSError, _SessionFailed, _Stopped) as exc:
                if not self._stopping:
                    self._ready()  # a plugin that cannot start says so first
                    self._log.error("NRI connection failed: %s", exc)
                    if not self._ever_registered:
                        self.failed = str(exc)
            return
        # the first connection is made before tenacity is imported (~10 ms that would delay
        # the first registration); the backoff loop takes over once it failed or ended
        try:
            await self._session()
        except _Stopped:
            return
        except (OSError, _SessionFailed) as exc:
            self._ready()  # a plugin that cannot start says so now, not once connected
            what = "lost the runtime" if isinstance(exc, _SessionFailed) else \
                "cannot reach the runtime"
            self._log.warning("NRI: %s at %s (%s); reconnecting in %.1fs", what,
                              self.socket_path, exc, self._backoff_initial)
            await self._sleep(self._backoff_initial)
        from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential

        while not self._stopping:
            retrying = AsyncRetrying(
                retry=retry_if_exception_type((OSError, _SessionFailed)),
                wait=wait_exponential(multiplier=self._backoff_initial, max=self._backoff_max),
                sleep=self._sleep,
                before_sleep=self._before_sleep,
                reraise=True,
            )
            try:
                async for attempt in retrying:
                    with attempt:
                        await self._session()
            except _Stopped:
                break

    # --- connection -------------------------------------------------------------------------
    async def _sleep(self, seconds: float) -> None:
        if self._stop_event is None:
            self._stop_event = asyncio.Event()
            if self._stopping:
                return
        try:
            await asyncio.wait_for(self._stop_event.wait(), seconds)
        except TimeoutError:
            pass

    def _before_sleep(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        # every attempt is visible with its reason; after 10 only every 10th (backoff is long)
        n = state.attempt_number
        level = logging.WARNING if n == 1 else logging.INFO if n <= 10 or n % 10 == 0 else \
            logging.DEBUG
        what = "lost the runtime" if isinstance(exc, _SessionFailed) else "cannot reach the runtime"
        self._log.log(level, "NRI: %s at %s (%s); reconnect attempt %d in %.1fs",
                      what, self.socket_path, exc, state.attempt_number, wait)

    async def _connect(self, mux: Mux) -> None:
        loop = asyncio.get_running_loop()
        import socket  # (with asyncio: not before the first requests are answered)

        if self._early is not None:
            sock, self._early = self._early.sock, None
            if not isinstance(sock, socket.socket):  # (a bare _socket.socket, cli's)
                sock = socket.socket(sock.family, sock.type, fileno=sock.detach())
            sock.setblocking(False)
            await loop.create_unix_connection(lambda: mux, sock=sock)
        elif self._fd is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=self._fd)
            await loop.create_unix_connection(lambda: mux, sock=sock)
        else:
            assert self.socket_path is not None
            await loop.create_unix_connection(lambda: mux, self.socket_path)

    async def _session(self) -> None:
        """One connection: register, serve until it closes. Raises _SessionFailed if it
        ended before registration or within ``stable_after`` seconds of it, OSError if it
        cannot connect, _Stopped after stop(); returns after a long-lived connection."""
        # a session the blocking server began (serve_first_requests): its unread bytes come
        # first, its stream ids and Synchronize parts continue, its registration may be done;
        # what the handlers left for the loop goes to it once connected (or when it stops)
        handover, self._handover = self._handover, None
        if self._stopping:
            if handover is not None:
                handover.pre.transfer(asyncio.get_running_loop())
            raise _Stopped
        from nri_cpumgr.transport.mux import Mux
        from nri_cpumgr.transport.ttrpc import Client, Server

        mux = Mux(logger=self._log, preface=handover.preface if handover else b"")
        # both conns are open before the socket is read: with an early registration the
        # runtime's answer (and its Configure) may already be waiting in the socket
        if handover is None:
            self._sync_pods, self._sync_containers = [], []
            self._sync_parts, self._sync_handler_s, self._sync_bytes = 0, 0.0, 0
            self._after_configure = None
        Server(mux, PLUGIN_SERVICE_CONN, self._methods, logger=self._log,
               after_reply=self._after_reply,
               last_sid=handover.last_sid if handover is not None else 0)
        taken = handover is not None and handover.registered
        early_sid = self._early.sid if self._early is not None else -1
        client = Client(mux, RUNTIME_SERVICE_CONN, logger=self._log,
                        next_sid=early_sid + 2 if taken else 1)
        registration = None
        if self._early is not None and not taken:
            registration = client.expect(self._early.sid, timeout=self._register_timeout)
        try:
            await self._connect(mux)
            if self._stopping:
                raise _Stopped
        except BaseException:
            if handover is not None:
                handover.pre.transfer(asyncio.get_running_loop())
            mux.close()  # (fails what waits on it, the early registration's answer too)
            if registration is not None:
                with contextlib.suppress(Exception):
                    await registration
            raise
        self.sessions += 1
        self._mux = mux
        if handover is not None:
            if taken:  # (before the handlers' timers can call update_containers)
                self._client = client
            handover.pre.transfer(asyncio.get_running_loop())
        where = self.socket_path or f"fd {self._fd}"
        if handover is None:
            self._log.info("NRI: connected to the runtime at %s%s", where,
                           " (registration sent before the event loop started)"
                           if registration is not None else "")
        try:
            if taken:
                pass  # (logged when its reply came)
            elif registration is None:
                req = nri_pb2.RegisterPluginRequest(plugin_name=self.name, plugin_idx=self.idx)
                registration = client.call(RUNTIME_SERVICE, "RegisterPlugin",
                                           req.SerializeToString(),
                                           timeout=self._register_timeout)
            if registration is not None:
                try:
                    await registration
                except TtrpcError as exc:
                    self._log.error("NRI: registration of %s-%s refused: %s",
                                    self.idx, self.name, exc.message)
                    raise _SessionFailed(f"registration refused: {exc.message}") from None
                except (ConnectionError, TimeoutError) as exc:
                    raise _SessionFailed(f"registration failed: {exc!r}") from None
            self._client = client
            self._registered = self._ever_registered = True
            self._ready()  # (already built when Configure came first)
            if not taken:
                runtime = f"{self.runtime_name} {self.runtime_version}".strip() or \
                    "the runtime"
                self._log.info("NRI: registered as %s-%s with %s", self.idx, self.name,
                               runtime)
            if self._pending_updates:
                self._schedule_flush()
            assert mux.lost is not None
            since = asyncio.get_running_loop().time()
            exc = await mux.lost
            lasted = asyncio.get_running_loop().time() - since
            if not self._stopping:
                self._log.warning("NRI: connection to the runtime lost (%s)", exc or "EOF")
        finally:
            self._registered = False
            self._client = None
            self._mux = None
            mux.close()
            dropped = len(self._pending_updates)
            self._pending_updates = []
            self._sync_pods, self._sync_containers = [], []
            self._sync_parts, self._sync_handler_s, self._sync_bytes = 0, 0.0, 0
            self._after_configure = None
            if dropped:
                self._log.warning("NRI: %d queued container updates dropped on disconnect",
                                  dropped)
            self._log.info("NRI: disconnected from %s", where)
            try:
                if self._handlers is not None:
                    self._handlers.disconnected()
            except Exception:
                self._log.exception("NRI: disconnected() handler failed")
        if self._stopping:
            raise _Stopped
        if self._reconnect and lasted < self._stable_after:
            raise _SessionFailed(f"connection lost {lasted:.1f}s after registration")

    # --- dispatch ---------------------------------------------------------------------------
    def _wrap(
        self, method: str, req_cls: type[_M], fn: Callable[[_M], Message | None]
    ) -> Handler:
        def handle(payload: bytes) -> bytes:
            t0 = time.perf_counter()
            self._last_payload = len(payload)
            try:
                try:
                    req = req_cls.FromString(payload)
                except DecodeError as exc:
                    raise TtrpcError(
                        INVALID_ARGUMENT, f"malformed {req_cls.__name__}: {exc}") from None
                self._in_handler = True
                try:
                    resp = fn(req)
                except PluginError as exc:
                    if not isinstance(exc, _BuildFailed):  # (that one ends the plugin)
                        self._log.warning("NRI: %s refused: %s", req_cls.__name__, exc)
                    raise TtrpcError(UNKNOWN, str(exc)) from None
                finally:
                    self._in_handler = False
                return resp.SerializeToString() if resp is not None else b""
            finally:
                self._check_budget(method, time.perf_counter() - t0)

        return handle

    def _check_budget(self, method: str, seconds: float) -> None:
        """WARNING when ``seconds`` (one handler call; for Synchronize, the sum over all parts
        of a split sync, judged at its last part) exceeds half of :attr:`request_budget_ms`."""
        if method == "Synchronize":
            self._sync_handler_s += seconds
            if self._sync_parts:  # an intermediate part: judged with the last one
                return
            seconds, self._sync_handler_s = self._sync_handler_s, 0.0
        ms = seconds * 1e3
        budget = self.request_budget_ms
        if ms > budget / 2:
            self._log.warning(
                "NRI: %s took %.0f ms, more than half of the runtime's %d ms request timeout "
                "(a late answer disconnects the plugin)", method, ms, budget)

    def _configure(self, req: nri_pb2.ConfigureRequest) -> nri_pb2.ConfigureResponse:
        self.runtime_name = req.runtime_name
        self.runtime_version = req.runtime_version
        self.registration_timeout_ms = max(0, int(req.registration_timeout))
        self.request_timeout_ms = max(0, int(req.request_timeout))
        if req.registration_timeout or req.request_timeout:
            self._log.info(
                "NRI: configured by %s %s: registration timeout %d ms, request timeout %d ms",
                req.runtime_name, req.runtime_version, req.registration_timeout,
                req.request_timeout)
        else:
            self._log.info("NRI: configured by %s %s (no timeouts given: request timeout "
                           "assumed %d ms)", req.runtime_name, req.runtime_version,
                           DEFAULT_REQUEST_TIMEOUT_MS)
        if self._handlers is None and self._build_error is None:
            # the answer does not depend on the build: it goes out first and the build runs
            # right after it, before the next request is read, while the runtime gathers its
            # Synchronize (tens of ms of imports and set-up off the runtime's wait)
            self._after_configure = lambda: self._ready().configure(req)
        else:
            self._ready().configure(req)
        return nri_pb2.ConfigureResponse(events=self.events & VALID_EVENTS_V061)

    def _synchronize(self, req: nri_pb2.SynchronizeRequest) -> nri_pb2.SynchronizeResponse:
        self._sync_pods.extend(req.pods)
        self._sync_containers.extend(req.containers)
        self._sync_parts += 1
        self._sync_bytes += self._last_payload
        if req.more:
            self._log.info("NRI: synchronize part %d: %d pods, %d containers, %d bytes; "
                           "more follow", self._sync_parts, len(req.pods), len(req.containers),
                           self._last_payload)
            return nri_pb2.SynchronizeResponse(more=True)
        pods, self._sync_pods = self._sync_pods, []
        containers, self._sync_containers = self._sync_containers, []
        parts, self._sync_parts = self._sync_parts, 0
        size, self._sync_bytes = self._sync_bytes, 0
        self._log.info("NRI: synchronize with %d pods, %d containers, %d bytes in %d part%s",
                       len(pods), len(containers), size, parts, "" if parts == 1 else "s")
        updates = self._ready().synchronize(pods, containers)
        return nri_pb2.SynchronizeResponse(update=updates)

    def _shutdown(self, req: nri_pb2.Empty) -> nri_pb2.Empty:
        self._log.info("NRI: the runtime is shutting down")
        return nri_pb2.Empty()

    def _state_change(self, req: nri_pb2.StateChangeEvent) -> nri_pb2.Empty:
        self._ready().state_change(req)
        return nri_pb2.Empty()

    # --- unsolicited updates ----------------------------------------------------------------
    def _after_reply(self) -> None:
        after = self._handlers_after
        if after is not None:
            try:
                after()
            except Exception as exc:  # noqa: BLE001 - as a handler's failure is logged
                self._log.error("NRI after-reply work failed: %s", exc, exc_info=exc)
        configure, self._after_configure = self._after_configure, None
        if configure is not None:
            try:
                configure()
            except _BuildFailed:  # (stop() was called: run() raises the build's error)
                return
            except Exception as exc:  # noqa: BLE001 - as a handler's failure is logged
                self._log.error("NRI Configure handler failed: %s", exc, exc_info=exc)
        if self._pending_updates:
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        if self._client is None or (self._flush_task is not None and not self._flush_task.done()):
            return
        self._flush_task = asyncio.get_running_loop().create_task(self._flush(self._client))

    async def _flush(self, client: Client) -> None:
        while self._pending_updates and client is self._client:
            batch, self._pending_updates = self._pending_updates, []
            req = nri_pb2.UpdateContainersRequest(update=batch)
            try:
                data = await client.call(RUNTIME_SERVICE, "UpdateContainers",
                                         req.SerializeToString(), timeout=self._update_timeout)
                failed = nri_pb2.UpdateContainersResponse.FromString(data).failed
            except (TtrpcError, ConnectionError, TimeoutError, ValueError, DecodeError) as exc:
                self._log.warning("NRI: UpdateContainers for %s failed: %s",
                                  [u.container_id for u in batch], exc)
                continue
            if failed:
                self._log.warning("NRI: runtime failed to update %s",
                                  [u.container_id for u in failed])
            else:
                self._log.info("NRI: runtime applied updates to %s",
                               [u.container_id for u in batch])
