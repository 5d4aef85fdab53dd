"""The session's first requests on the blocking socket, before asyncio is imported (issue 34:
launch -> synchronized).

After the early registration (:func:`~nri_cpumgr.transport.wire.register_early`) the runtime
sends Configure, then Synchronize (containerd/nri pkg/adaptation plugin.go: ``configure`` and
``synchronize`` follow the registration; the RegisterPlugin reply can come before or after
Configure). :func:`serve_first_requests` reads the mux frames and ttrpc messages of that
socket itself and answers those two requests with the stub's own handlers (the same
:class:`~nri_cpumgr.transport.wire.UnaryServer` rules and the stub's ``_wrap``: event mask,
timeouts, budget and its WARNING, logging, a split Synchronize with v0.8 ``more``); the
deferred build and its ``configure`` run right after Configure's answer, the handlers'
after-reply work after each answer, as on the event loop. Whatever the handlers schedule on a
loop meanwhile waits in a :class:`~nri_cpumgr.aio.PreLoop` for the event loop.

It stops, and leaves the rest of the session to the event loop (:meth:`Stub.run
<nri_cpumgr.transport.stub.Stub.run>`), after the answer to the last part of Synchronize,
or at once, consuming nothing more, at anything else: a request other than Configure or
Synchronize (Shutdown included), a message it does not expect, a refused registration, EOF or
a socket error, a frame or message over the size limit, a runtime that sends nothing for
``wait`` seconds, a build that failed, :meth:`Stub.stop
<nri_cpumgr.transport.stub.Stub.stop>` (a signal handler may call it: it is seen after the
request at hand, or within ``wait`` seconds while it waits for one). What it read and did not
consume is handed over with the socket (:class:`Handover`): the event loop's mux takes it as
the first data received, so its transport sees the session exactly as if it had read every
byte itself.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from nri_cpumgr import aio
from nri_cpumgr.transport.wire import (
    MUX_HEADER,
    MUX_HEADER_LEN,
    OK,
    PLUGIN_SERVICE,
    PLUGIN_SERVICE_CONN,
    RUNTIME_SERVICE_CONN,
    TTRPC_HEADER,
    TTRPC_HEADER_LEN,
    TYPE_REQUEST,
    TYPE_RESPONSE,
    EarlyRegistration,
    UnaryServer,
    mux_frames,
    ttrpc_message,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    #: a :class:`nri_cpumgr.transport.stub.Stub` (not imported: the stub imports this module)
    Stub = Any

#: Seconds the blocking session waits for the runtime's next bytes before it hands over to
#: the event loop (the runtime sends Configure right after the registration).
FIRST_REQUEST_WAIT = 1.0
#: Bound on one incoming frame or message (bytes), as the event loop's transport.
MAX_IN = 64 << 20
#: The requests served before the event loop.
SERVED = frozenset({(PLUGIN_SERVICE, "Configure"), (PLUGIN_SERVICE, "Synchronize")})
_READ_SIZE = 256 << 10

_log = logging.getLogger(__name__)


@dataclass
class Handover:
    """What the blocking session leaves to the event loop: ``preface``, the bytes read and not
    consumed, as mux frames (a connection's partly read message as one frame of that
    connection, then the raw rest); ``registered``, whether the RegisterPlugin reply was
    taken (OK); ``last_sid``, the last request stream answered on the Plugin service conn;
    ``pre``, the callbacks, timers and tasks the handlers left for the loop; ``why`` it
    stopped; ``served``, the requests it answered."""

    preface: bytes
    registered: bool
    last_sid: int
    pre: aio.PreLoop
    why: str
    served: int


class _Stop(Exception):
    """End the blocking session: ``str`` says why; the message at hand is not consumed."""


class _StopAfter(_Stop):
    """End the blocking session; the message at hand was handled (consumed)."""


class _Session:
    def __init__(self, stub: Stub, early: EarlyRegistration, wait: float,
                 max_in: int) -> None:
        self.stub = stub
        self.early = early
        self.sock = early.sock
        self.wait = wait
        self.max_in = max_in
        self.unary = UnaryServer(stub._methods, logger=stub._log)
        self.raw = bytearray()
        self.pos = 0
        self.conns = {PLUGIN_SERVICE_CONN: bytearray(), RUNTIME_SERVICE_CONN: bytearray()}
        self.registered = False
        self.served = 0
        self.pre = aio.PreLoop()

    def run(self) -> str:
        """Serve until a :class:`_Stop`; returns its reason."""
        sock = self.sock
        sock.settimeout(self.wait)
        try:
            with aio.active(self.pre):
                while True:
                    self._frames()
                    if self.stub._stopping:  # (stop() from a signal handler)
                        raise _Stop("the plugin stopped")
                    try:
                        data = sock.recv(_READ_SIZE)
                    except TimeoutError:
                        if self.stub._stopping:
                            raise _Stop("the plugin stopped") from None
                        raise _Stop(f"no data from the runtime within {self.wait:g} s") from None
                    except OSError as e:
                        raise _Stop(f"socket error: {e}") from None
                    if not data:
                        raise _Stop("EOF")
                    self.raw += data
        except _Stop as stop:
            return str(stop)
        finally:
            sock.settimeout(None)

    def _frames(self) -> None:
        raw, pos = self.raw, self.pos
        try:
            while len(raw) - pos >= MUX_HEADER_LEN:
                conn, length = MUX_HEADER.unpack_from(raw, pos)
                if length > self.max_in:
                    raise _Stop(f"a frame of {length} bytes")
                stop = pos + MUX_HEADER_LEN + length
                if stop > len(raw):
                    break
                buf = self.conns.get(conn)
                if buf is not None and length:  # (frames for another conn are dropped)
                    buf += raw[pos + MUX_HEADER_LEN:stop]
                pos = self.pos = stop
                if buf is not None and length:
                    self._messages(conn, buf)
        finally:
            if self.pos:
                del raw[:self.pos]
                self.pos = 0

    def _messages(self, conn: int, buf: bytearray) -> None:
        off = 0
        try:
            while len(buf) - off >= TTRPC_HEADER_LEN:
                length, sid, mtype, _flags = TTRPC_HEADER.unpack_from(buf, off)
                if length > self.max_in:
                    raise _Stop(f"a message of {length} bytes")
                end = off + TTRPC_HEADER_LEN + length
                if end > len(buf):
                    break
                data = bytes(buf[off + TTRPC_HEADER_LEN:end])
                try:
                    if conn == PLUGIN_SERVICE_CONN:
                        done = self._request(sid, mtype, data)
                    else:
                        done = False
                        self._response(sid, mtype, data)
                except _StopAfter:
                    off = end
                    raise
                off = end  # (consumed: a _Stop above leaves it in ``buf``)
                if done:
                    raise _Stop("synchronized")
        finally:
            if off:
                del buf[:off]

    def _response(self, sid: int, mtype: int, data: bytes) -> None:
        if mtype != TYPE_RESPONSE or sid != self.early.sid or self.registered:
            raise _Stop(f"an unexpected message (type {mtype}, stream {sid}) on the Runtime "
                        "service connection")
        from google.protobuf.message import DecodeError

        from nri_cpumgr.api import ttrpc_pb2

        try:
            resp = ttrpc_pb2.Response.FromString(data)
        except DecodeError:
            raise _Stop("a malformed RegisterPlugin reply") from None
        if resp.status.code != OK:
            raise _Stop("the registration was refused")
        self.registered = True
        stub = self.stub
        stub._registered = stub._ever_registered = True
        runtime = f"{stub.runtime_name} {stub.runtime_version}".strip() or "the runtime"
        stub._log.info("NRI: registered as %s-%s with %s", stub.idx, stub.name, runtime)

    def _request(self, sid: int, mtype: int, data: bytes) -> bool:
        """Answer a Configure or Synchronize request; True after the last part of a
        Synchronize. Raises _Stop (nothing consumed) for anything else."""
        if mtype != TYPE_REQUEST:
            raise _Stop(f"a message of type {mtype} on the Plugin service connection")
        if self.unary.stream_error(sid) is not None:
            raise _Stop(f"a request on stream {sid}")
        from google.protobuf.message import DecodeError

        from nri_cpumgr.api import ttrpc_pb2

        try:
            req = ttrpc_pb2.Request.FromString(data)
        except DecodeError:
            raise _Stop("a malformed request") from None
        if (req.service, req.method) not in SERVED:
            raise _Stop(f"a {req.method or 'nameless'} request")
        stub = self.stub
        answer = self.unary.handle(sid, req.service, req.method, req.payload)
        assert type(answer) is bytes  # (the stub's handlers answer at once)
        msg = ttrpc_message(sid, TYPE_RESPONSE, answer)
        self.served += 1
        try:
            self.sock.sendall(b"".join(mux_frames(PLUGIN_SERVICE_CONN, msg)))
        except OSError as e:  # (the event loop's transport sees the broken socket next)
            stub._log.info("dropping answer to stream %d: %s", sid, e)
            raise _StopAfter(f"socket error: {e}") from None
        stub._after_reply()
        self.pre.run_ready()
        if stub._stopping:
            raise _StopAfter("the plugin stopped")
        return req.method == "Synchronize" and stub._sync_parts == 0

    def handover(self, why: str) -> Handover:
        parts = [MUX_HEADER.pack(conn, len(buf)) + bytes(buf)
                 for conn, buf in self.conns.items() if buf]
        parts.append(bytes(self.raw))
        return Handover(b"".join(parts), self.registered, self.unary.last_sid, self.pre, why,
                        self.served)


def serve_first_requests(stub: Stub, early: EarlyRegistration, *,
                         wait: float = FIRST_REQUEST_WAIT, max_in: int = MAX_IN) -> Handover:
    """Serve the runtime's first requests on ``early``'s blocking socket with ``stub``'s
    handlers (module doc) until the session is synchronized or anything else comes; returns
    what the event loop takes over. ``wait``: seconds without data from the runtime after
    which it stops. Raises nothing for the runtime's doing (it stops instead); a failed
    build stops it too (``stub.run`` raises it)."""
    t0 = time.perf_counter()
    stub._log.info("NRI: connected to the runtime at %s (registration sent before the event "
                   "loop started; the first requests are answered before it too)",
                   stub.socket_path or f"fd {stub._fd}")
    session = _Session(stub, early, wait, max_in)
    why = session.run()
    out = session.handover(why)
    stub._log.info("NRI: %d request%s answered before the event loop (%.1f ms); it takes "
                   "over: %s", out.served, "" if out.served == 1 else "s",
                   (time.perf_counter() - t0) * 1e3, why)
    return out
