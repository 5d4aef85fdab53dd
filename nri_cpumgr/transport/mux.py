"""The NRI connection multiplexer (containerd/nri pkg/net/multiplex) as an asyncio protocol.

One unix stream socket carries several logical connections. Every frame is
``conn_id u32 BE | length u32 BE | payload``; conn 1 carries the Plugin service (the plugin is
the ttrpc server), conn 2 the Runtime service (the plugin is the ttrpc client). Conn 0 is
reserved, there is no handshake, and frames for a conn nobody opened are dropped.

Write rule (nri mux.go): the runtime reads every frame payload into a 4096-byte buffer and a
larger frame tears the whole connection down, so each outgoing message is split into frames of
at most :data:`MAX_FRAME` bytes *including* the 8-byte header, and one frame never carries
parts of two messages. Incoming frames may be of any size up to ``max_frame_in`` (containerd
writes a 4096-byte frame and then the rest of a large message as one frame); a longer length
is treated as garbage and closes the connection before anything is allocated for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from nri_cpumgr.transport.wire import (  # noqa: F401 - the frame format, re-exported
    MAX_CHUNK,
    MAX_FRAME,
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    mux_frames,
)
from nri_cpumgr.transport.wire import MUX_HEADER as HEADER
from nri_cpumgr.transport.wire import MUX_HEADER_LEN as HEADER_LEN

#: Default bound on one incoming frame (bytes); also bounds one ttrpc message.
DEFAULT_MAX_FRAME_IN = 64 << 20

_log = logging.getLogger(__name__)


class ProtocolError(Exception):
    """The peer sent bytes that cannot be a valid frame or message; the connection is closed."""


class ConnSink(Protocol):
    """Receiver of one logical connection's byte stream."""

    def feed(self, data: memoryview) -> None:
        """Consume the next chunk of the stream (valid only during the call).

        Raises ProtocolError on garbage; the mux then closes the socket.
        """

    def connection_lost(self, exc: BaseException | None) -> None:
        """The socket is gone; fail whatever waits on it."""


class Mux(asyncio.Protocol):
    """One multiplexed socket. Create it per socket; it is never reused after a close.

    ``on_lost(exc)`` is called once when the socket closes (``exc`` None on a clean EOF or a
    local close). ``max_frame_in`` bounds one incoming frame in bytes. ``preface``: bytes read
    from the socket before it was handed to the event loop and not consumed yet (mux frames,
    :mod:`~nri_cpumgr.transport.firstreqs`), taken as the first data received once connected.
    """

    def __init__(
        self,
        on_lost: Callable[[BaseException | None], None] | None = None,
        *,
        max_frame_in: int = DEFAULT_MAX_FRAME_IN,
        logger: logging.Logger | None = None,
        preface: bytes = b"",
    ) -> None:
        self._on_lost = on_lost
        self._preface = preface
        self._max_frame_in = max_frame_in
        self._log = logger or _log
        self._sinks: dict[int, ConnSink] = {}
        self._buf = bytearray()
        self._need = 0  # bytes of payload still missing for the current frame (with header)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.lost: asyncio.Future[BaseException | None] | None = None
        self.frames_out = 0  # counters for tests/diagnostics
        self.bytes_out = 0

    # --- setup -----------------------------------------------------------------------------
    def open(self, conn_id: int, sink: ConnSink) -> None:
        """Route the payload of frames for ``conn_id`` (1..2**32-1) to ``sink``."""
        if conn_id == 0:
            raise ValueError("conn 0 is reserved")
        self._sinks[conn_id] = sink

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.lost = asyncio.get_running_loop().create_future()
        if self._preface:  # (before the transport reads: the bytes keep their order)
            data, self._preface = self._preface, b""
            self.data_received(data)

    # --- reading ---------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        buf = self._buf
        if not buf and len(data) >= HEADER_LEN:
            # Fast path: no partial frame pending; parse straight from ``data``.
            view = memoryview(data)
            pos = self._consume(view)
            if pos < len(data) and not self.closed:
                buf += view[pos:]
            return
        # ``self._buf`` is never resized once views of it were handed out: a sink (or an
        # exception traceback holding its frames) may keep a slice alive past the call, and
        # resizing an exported bytearray raises BufferError. After a parse the remainder
        # moves to a fresh buffer instead.
        buf += data
        if len(buf) < self._need:
            return  # large frame still arriving: no parsing, no copies
        with memoryview(buf) as view:
            pos = self._consume(view)
        if pos:
            self._buf = buf[pos:]

    def _consume(self, view: memoryview) -> int:
        """Dispatch every complete frame in ``view``; return the bytes consumed."""
        pos = 0
        end = len(view)
        sinks = self._sinks
        while end - pos >= HEADER_LEN:
            conn_id, length = HEADER.unpack_from(view, pos)
            if length > self._max_frame_in:
                self._fail(ProtocolError(f"frame of {length} bytes for conn {conn_id} exceeds "
                                         f"the {self._max_frame_in}-byte limit"))
                return pos
            stop = pos + HEADER_LEN + length
            if stop > end:
                self._need = stop - pos
                return pos
            sink = sinks.get(conn_id)
            if sink is not None and length:
                try:
                    sink.feed(view[pos + HEADER_LEN:stop])
                except ProtocolError as exc:
                    self._fail(exc)
                    return pos
            pos = stop
            if self.closed:
                return pos
        self._need = HEADER_LEN
        return pos

    def _fail(self, exc: BaseException) -> None:
        self._log.warning("NRI connection broken: %s", exc)
        self.close(exc)

    def eof_received(self) -> bool | None:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: BaseException | None) -> None:
        self._closed(exc)

    def _closed(self, exc: BaseException | None) -> None:
        if self.lost is not None and not self.lost.done():
            self.lost.set_result(exc)
        if self.closed and self._sinks == {}:
            return
        self.closed = True
        self._buf = bytearray()
        sinks, self._sinks = self._sinks, {}
        for sink in sinks.values():
            sink.connection_lost(exc)
        if self._on_lost is not None:
            cb, self._on_lost = self._on_lost, None
            cb(exc)

    # --- writing ---------------------------------------------------------------------------
    def send(self, conn_id: int, msg: bytes) -> bool:
        """Write one whole message to ``conn_id``, split into frames of <= MAX_FRAME bytes.

        Returns False (and writes nothing) if the socket is already closed: a late answer
        for a dead connection is dropped, never redirected.
        """
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return False
        n = len(msg)
        parts = mux_frames(conn_id, msg)
        if len(parts) == 1:
            transport.write(parts[0])
            self.frames_out += 1
        else:
            transport.write(b"".join(parts))
            self.frames_out += len(parts) // 2
        self.bytes_out += n
        return True

    def close(self, exc: BaseException | None = None) -> None:
        """Close the socket now (pending writes are flushed by the transport)."""
        if self.closed:
            return
        transport = self.transport
        if transport is not None:
            if exc is not None:
                transport.abort()
            else:
                transport.close()
        # Report the loss right away so nothing else is written or awaited on this socket.
        self._closed(exc)
