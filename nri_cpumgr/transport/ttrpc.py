"""A minimal ttrpc (containerd/ttrpc) client and server over one multiplexed connection.

Message: ``length u32 BE | stream_id u32 BE | type u8 | flags u8 | data`` where type 1 is a
request (data = ``ttrpc.Request``), 2 a response (data = ``ttrpc.Response``), 3 stream data.
Only unary calls are used by NRI (flags 0). Rules (ttrpc client.go / server.go):

* a client numbers its streams with odd, strictly increasing ids starting at 1 on each
  connection;
* a server answers an even or a reused/decreasing id with InvalidArgument (3), an unknown
  service or method with Unimplemented (12), a failing handler with the handler's status
  (Unknown, 2, unless it raised :class:`TtrpcError` with another code);
* an answer goes to the connection its request came from; if that connection is gone the
  answer is dropped.

ttrpc's own message limit is 4 MiB (:data:`MAX_MESSAGE_OUT` for what we send), but containerd
1.7 sends a Synchronize of any size as one message, so incoming messages are accepted up to
``max_message_in`` (64 MiB by default); a longer length closes the connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from nri_cpumgr.api import ttrpc_pb2
from nri_cpumgr.transport.mux import ProtocolError

if TYPE_CHECKING:
    from nri_cpumgr.transport.mux import Mux

from nri_cpumgr.transport.wire import (  # noqa: F401 - the message format, re-exported
    DEADLINE_EXCEEDED,
    INVALID_ARGUMENT,
    MAX_MESSAGE_OUT,
    OK,
    RESOURCE_EXHAUSTED,
    TYPE_DATA,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    UNAVAILABLE,
    UNIMPLEMENTED,
    UNKNOWN,
    Handler,
    TtrpcError,
    UnaryServer,
    ok_response,
    ttrpc_message,
    ttrpc_request,
)
from nri_cpumgr.transport.wire import TTRPC_HEADER as HEADER
from nri_cpumgr.transport.wire import TTRPC_HEADER_LEN as HEADER_LEN

#: Default bound on one incoming message (bytes).
DEFAULT_MAX_MESSAGE_IN = 64 << 20

_log = logging.getLogger(__name__)


class _Endpoint:
    """Reassembles ttrpc messages from one mux connection's byte stream."""

    def __init__(self, mux: Mux, conn_id: int, *, max_message_in: int,
                 logger: logging.Logger | None) -> None:
        self.mux = mux
        self.conn_id = conn_id
        self._max_in = max_message_in
        self._buf = bytearray()
        self._log = logger or _log
        mux.open(conn_id, self)

    def feed(self, data: memoryview) -> None:
        # As in the mux: a buffer views were taken of is replaced, never resized (a slice
        # kept alive by a traceback would make the resize raise BufferError).
        buf = self._buf
        if buf:
            buf += data
            with memoryview(buf) as view:
                pos = self._parse(view)
            if pos:
                self._buf = buf[pos:]
            return
        pos = self._parse(data)
        if pos < len(data):
            self._buf = bytearray(data[pos:])

    def _parse(self, view: memoryview) -> int:
        pos = 0
        end = len(view)
        while end - pos >= HEADER_LEN:
            length, sid, mtype, flags = HEADER.unpack_from(view, pos)
            if length > self._max_in:
                raise ProtocolError(f"ttrpc message of {length} bytes on conn {self.conn_id} "
                                    f"exceeds the {self._max_in}-byte limit")
            stop = pos + HEADER_LEN + length
            if stop > end:
                break
            self._message(sid, mtype, flags, bytes(view[pos + HEADER_LEN:stop]))
            pos = stop
            if self.mux.closed:
                break
        return pos

    def _message(self, sid: int, mtype: int, flags: int, data: bytes) -> None:
        raise NotImplementedError

    def _write(self, sid: int, mtype: int, data: bytes) -> bool:
        return self.mux.send(self.conn_id, ttrpc_message(sid, mtype, data))

    def connection_lost(self, exc: BaseException | None) -> None:
        self._buf = bytearray()


class Server(_Endpoint):
    """ttrpc server on one mux connection; methods are registered by (service, method).

    A handler receives the serialized request and returns the serialized response, or an
    awaitable of it (then the answer is written when it completes, on this connection only).
    It raises :class:`TtrpcError` for a specific status; any other exception answers
    Unknown (2) with ``str(exc)`` (the rules: :class:`~nri_cpumgr.transport.wire.UnaryServer`).
    ``last_sid``: the last request stream already answered on this connection (a session the
    blocking server began, :mod:`~nri_cpumgr.transport.firstreqs`).
    """

    def __init__(self, mux: Mux, conn_id: int, methods: dict[tuple[str, str], Handler], *,
                 max_message_in: int = DEFAULT_MAX_MESSAGE_IN,
                 logger: logging.Logger | None = None,
                 after_reply: Callable[[], None] | None = None, last_sid: int = 0) -> None:
        super().__init__(mux, conn_id, max_message_in=max_message_in, logger=logger)
        self._unary = UnaryServer(methods, logger=self._log, last_sid=last_sid)
        self._after_reply = after_reply
        self._tasks: set[asyncio.Task[None]] = set()

    def _message(self, sid: int, mtype: int, flags: int, data: bytes) -> None:
        if mtype != TYPE_REQUEST:
            self._log.debug("ttrpc server: ignoring message type %d on stream %d", mtype, sid)
            return
        method, answer = self._unary.receive(sid, data)
        if type(answer) is not bytes:
            task = asyncio.ensure_future(self._finish(sid, method, answer))  # type: ignore[arg-type]
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return
        self._answer(sid, answer)

    async def _finish(self, sid: int, method: str, pending: Awaitable[bytes]) -> None:
        try:
            result = await pending
        except Exception as exc:  # noqa: BLE001
            self._answer(sid, self._unary.failure(method, exc))
            return
        self._answer(sid, self._unary.result(result))

    def _answer(self, sid: int, data: bytes) -> None:
        if not self._write(sid, TYPE_RESPONSE, data):
            self._log.info("dropping answer to stream %d: its connection is gone", sid)
            return
        if self._after_reply is not None:
            self._after_reply()


class Client(_Endpoint):
    """ttrpc client on one mux connection. Stream ids are 1, 3, 5, ... for this connection
    (from ``next_sid``, odd, when streams were used before: a session the blocking server
    began, :mod:`~nri_cpumgr.transport.firstreqs`)."""

    def __init__(self, mux: Mux, conn_id: int, *,
                 max_message_in: int = DEFAULT_MAX_MESSAGE_IN,
                 logger: logging.Logger | None = None, next_sid: int = 1) -> None:
        super().__init__(mux, conn_id, max_message_in=max_message_in, logger=logger)
        self._next_sid = next_sid
        self._pending: dict[int, asyncio.Future[bytes]] = {}

    async def call(self, service: str, method: str, payload: bytes, *,
                   timeout: float | None = None,
                   metadata: dict[str, str] | None = None) -> bytes:
        """Call ``service/method`` with a serialized request; return the response payload.

        ``timeout`` is in seconds (also sent as ``timeout_nano``). Raises TtrpcError for a
        non-OK status, ConnectionError if the connection is or becomes closed,
        TimeoutError on timeout, ValueError for a request over 4 MiB.
        """
        data = ttrpc_request(service, method, payload, timeout=timeout, metadata=metadata)
        sid = self._next_sid
        self._next_sid += 2
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[sid] = fut
        if not self._write(sid, TYPE_REQUEST, data):
            del self._pending[sid]
            raise ConnectionError("NRI connection is closed")
        return await self._answer(sid, fut, timeout)

    def expect(self, sid: int, *, timeout: float | None = None) -> Awaitable[bytes]:
        """The answer to a request already written on this connection as stream ``sid``
        (odd; :func:`~nri_cpumgr.transport.wire.register_early` sends one before the event
        loop runs), as an awaitable. Call it before the connection delivers data: the
        stream is registered here, not when awaited. Later calls number their streams after
        ``sid``. The awaitable raises as :meth:`call`; ValueError here for an even, reused
        or already awaited ``sid``."""
        if sid % 2 == 0 or sid < self._next_sid or sid in self._pending:
            raise ValueError(f"stream {sid} cannot be awaited on this connection")
        self._next_sid = sid + 2
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[sid] = fut
        return self._answer(sid, fut, timeout)

    async def _answer(self, sid: int, fut: asyncio.Future[bytes],
                      timeout: float | None) -> bytes:
        try:
            if self.mux.closed and not fut.done():
                fut.cancel()
                raise ConnectionError("NRI connection is closed")
            if timeout is None:
                return await fut
            return await asyncio.wait_for(fut, timeout)
        finally:
            self._pending.pop(sid, None)

    def _message(self, sid: int, mtype: int, flags: int, data: bytes) -> None:
        if mtype != TYPE_RESPONSE:
            self._log.debug("ttrpc client: ignoring message type %d on stream %d", mtype, sid)
            return
        fut = self._pending.pop(sid, None)
        if fut is None or fut.done():
            self._log.debug("ttrpc client: response for unknown stream %d dropped", sid)
            return
        try:
            resp = ttrpc_pb2.Response.FromString(data)
        except DecodeError as exc:
            fut.set_exception(TtrpcError(UNKNOWN, f"malformed ttrpc response: {exc}"))
            return
        if resp.status.code != OK:
            fut.set_exception(TtrpcError(resp.status.code, resp.status.message))
        else:
            fut.set_result(resp.payload)

    def connection_lost(self, exc: BaseException | None) -> None:
        super().connection_lost(exc)
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(ConnectionError(f"NRI connection lost: {exc or 'EOF'}"))
