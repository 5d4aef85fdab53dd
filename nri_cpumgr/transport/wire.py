"""The NRI wire format without an event loop: mux frames, ttrpc request messages, event masks,
ttrpc's status codes and the server half of its unary calls (:class:`UnaryServer`), and the
first registration sent on a blocking socket.

Everything here imports only the standard library's ``socket``/``struct``, never asyncio (~50
ms of imports on a small node) nor, until a message other than the registration is framed, the
generated API and protobuf (~15 ms): :func:`register_early` lets the plugin send its
RegisterPlugin before the event loop, protobuf, the managers and the libraries they use are
loaded (issues 9 and 34, launch -> registered). The asyncio transport (:mod:`.mux`, :mod:`.ttrpc`,
:mod:`.stub`) frames its messages with the same functions.

Wire rules (containerd/nri pkg/net/multiplex, containerd/ttrpc; ../shared/docs/nri-protocol.md):
a mux frame is ``conn_id u32 BE | length u32 BE | payload`` and carries at most
:data:`MAX_FRAME` bytes with its header (the runtime reads a frame into a 4096-byte buffer);
a ttrpc message is ``length u32 BE | stream_id u32 BE | type u8 | flags u8 | data``.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from nri_cpumgr.transport.early import (  # noqa: F401 - re-exported
    RUNTIME_SERVICE,
    RUNTIME_SERVICE_CONN,
    TYPE_REQUEST,
    register_request,
    registration_bytes,
)

MUX_HEADER = struct.Struct(">II")
MUX_HEADER_LEN = MUX_HEADER.size
#: Largest outgoing frame, header included (nri mux.go reads into a 4096-byte buffer).
MAX_FRAME = 4096
MAX_CHUNK = MAX_FRAME - MUX_HEADER_LEN
#: conn 1 carries the Plugin service (we serve), conn 2 the Runtime service (we call).
PLUGIN_SERVICE_CONN = 1

TTRPC_HEADER = struct.Struct(">IIBB")
TTRPC_HEADER_LEN = TTRPC_HEADER.size
TYPE_RESPONSE = 2
TYPE_DATA = 3
#: ttrpc's messageLengthMax: the most we ever send in one message (bytes, without header).
MAX_MESSAGE_OUT = 4 << 20

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"

# google.golang.org/grpc/codes
OK = 0
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
UNAVAILABLE = 14

#: A unary method: serialized request in, serialized response out (or an awaitable of it).
Handler = Callable[[bytes], "bytes | Awaitable[bytes]"]

_log = logging.getLogger(__name__)


class TtrpcError(Exception):
    """A call failed with a ttrpc/gRPC status ``code`` and text ``message``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"code {code}: {message}")
        self.code = code
        self.message = message


def event_mask(*events: int) -> int:
    """Subscription bitmask for NRI ``Event`` values: bit ``1 << (event - 1)`` each.
    Raises ValueError for an event <= 0."""
    mask = 0
    for ev in events:
        if ev <= 0:
            raise ValueError(f"not a subscribable NRI event: {ev}")
        mask |= 1 << (ev - 1)
    return mask


def mux_frames(conn_id: int, msg: bytes) -> tuple[bytes | memoryview, ...]:
    """``msg`` for ``conn_id`` as mux frames of at most :data:`MAX_FRAME` bytes each (header
    included), one message per frame sequence: the pieces to write in order."""
    n = len(msg)
    if n <= MAX_CHUNK:
        return (MUX_HEADER.pack(conn_id, n) + msg,)
    view = memoryview(msg)
    parts: list[bytes | memoryview] = []
    for off in range(0, n, MAX_CHUNK):
        chunk = view[off:off + MAX_CHUNK]
        parts.append(MUX_HEADER.pack(conn_id, len(chunk)))
        parts.append(chunk)
    return tuple(parts)


def ttrpc_message(sid: int, mtype: int, data: bytes) -> bytes:
    """One ttrpc message (header + ``data``) on stream ``sid``, flags 0."""
    return TTRPC_HEADER.pack(len(data), sid, mtype, 0) + data


def ttrpc_request(service: str, method: str, payload: bytes, *, timeout: float | None = None,
                  metadata: dict[str, str] | None = None) -> bytes:
    """A serialized ``ttrpc.Request`` (``timeout`` in seconds, sent as ``timeout_nano``).
    Raises ValueError when it is over :data:`MAX_MESSAGE_OUT` bytes."""
    from nri_cpumgr.api import ttrpc_pb2  # (after the registration: see the module doc)

    req = ttrpc_pb2.Request(service=service, method=method, payload=payload)
    if timeout is not None:
        req.timeout_nano = int(timeout * 1e9)
    if metadata:
        req.metadata.extend(ttrpc_pb2.KeyValue(key=k, value=v) for k, v in metadata.items())
    data = req.SerializeToString()
    if len(data) > MAX_MESSAGE_OUT:
        raise ValueError(f"ttrpc request of {len(data)} bytes exceeds the 4 MiB limit")
    return data


def ok_response(payload: bytes) -> bytes:
    """The serialized ``ttrpc.Response`` of a successful call: ``status`` (field 1) an empty
    ``Status`` (code OK), then ``payload`` (field 2), as ``Response(status=Status(),
    payload=payload).SerializeToString()`` writes it (field order, an empty payload left
    out), without building the two messages per reply."""
    n = len(payload)
    if not n:
        return _OK_EMPTY
    if n < 0x80:
        return b"\x0a\x00\x12" + bytes((n,)) + payload
    return b"\x0a\x00\x12" + _varint(n) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_OK_EMPTY = b"\x0a\x00"  # (status only: an empty payload is not written)


def status_response(code: int, message: str) -> bytes:
    """The serialized ``ttrpc.Response`` of a failed call: ``Status(code, message)``."""
    from nri_cpumgr.api import ttrpc_pb2

    return ttrpc_pb2.Response(
        status=ttrpc_pb2.Status(code=code, message=message)).SerializeToString()


class _Parsed:
    """``ttrpc_pb2.Request`` and protobuf's ``DecodeError``, imported at the first request
    (after the registration: see the module doc) and then kept: an import statement in
    :meth:`UnaryServer.receive` cost every request 1.5 us (issue 34)."""

    Request: Any = None
    DecodeError: Any = None

    def load(self) -> None:
        from google.protobuf.message import DecodeError

        from nri_cpumgr.api import ttrpc_pb2

        self.DecodeError, self.Request = DecodeError, ttrpc_pb2.Request


_parsed = _Parsed()


class UnaryServer:
    """The server half of ttrpc's unary calls without I/O or an event loop: stream-id rules,
    request decoding, dispatch to ``methods`` by (service, method), the status of a failure
    (ttrpc server.go). :class:`~nri_cpumgr.transport.ttrpc.Server` writes its answers on the
    event loop, :mod:`~nri_cpumgr.transport.firstreqs` on the blocking socket before it.

    A handler receives the serialized request and returns the serialized response, or an
    awaitable of it; it raises :class:`TtrpcError` for a specific status, any other exception
    answers Unknown (2) with ``str(exc)``. ``last_sid``: the last stream id already served on
    this connection (a session taken over from the blocking server)."""

    def __init__(self, methods: dict[tuple[str, str], Handler], *,
                 logger: logging.Logger | None = None, last_sid: int = 0) -> None:
        self.methods = methods
        self.last_sid = last_sid
        self._log = logger or _log

    def stream_error(self, sid: int) -> str | None:
        """Why request stream ``sid`` is refused (InvalidArgument), or None (no change)."""
        if sid % 2 == 0:
            return f"stream id {sid} is even: client streams must use odd ids"
        if sid <= self.last_sid:
            return f"stream id {sid} reused or decreasing (last was {self.last_sid})"
        return None

    def receive(self, sid: int, data: bytes) -> tuple[str, bytes | Awaitable[bytes]]:
        """Request stream ``sid`` with serialized ``ttrpc.Request`` ``data``: (method name, the
        serialized ``ttrpc.Response`` to write, or an awaitable of the handler's payload for
        :meth:`result`)."""
        why = self.stream_error(sid)
        if why is not None:
            return "", status_response(INVALID_ARGUMENT, why)
        self.last_sid = sid
        if _parsed.Request is None:
            _parsed.load()
        try:
            req = _parsed.Request.FromString(data)
        except _parsed.DecodeError as exc:
            return "", status_response(INVALID_ARGUMENT, f"malformed ttrpc request: {exc}")
        return req.method, self.handle(sid, req.service, req.method, req.payload)

    def handle(self, sid: int, service: str, method: str,
               payload: bytes) -> bytes | Awaitable[bytes]:
        """Call the handler of a decoded request of stream ``sid`` (taken as the last one):
        the serialized ``ttrpc.Response``, or an awaitable of the handler's payload."""
        self.last_sid = sid
        handler = self.methods.get((service, method))
        if handler is None:
            return status_response(
                UNIMPLEMENTED, f"method {service}/{method} is not implemented by this plugin")
        try:
            result = handler(payload)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a status
            return self.failure(method, exc)
        if type(result) is not bytes and hasattr(result, "__await__"):
            return result  # type: ignore[return-value]
        return self.result(result)  # type: ignore[arg-type]

    def result(self, payload: bytes) -> bytes:
        """The serialized ``ttrpc.Response`` carrying a handler's ``payload``
        (ResourceExhausted when over the message limit)."""
        if len(payload) > MAX_MESSAGE_OUT - 64:
            return status_response(RESOURCE_EXHAUSTED,
                                   f"response of {len(payload)} bytes exceeds the ttrpc limit")
        return ok_response(payload)

    def failure(self, method: str, exc: Exception) -> bytes:
        """The serialized ``ttrpc.Response`` of a handler that raised ``exc``."""
        if isinstance(exc, TtrpcError):
            return status_response(exc.code, exc.message)
        self._log.error("NRI %s handler failed: %s", method, exc, exc_info=exc)
        return status_response(UNKNOWN, str(exc))


@dataclass
class EarlyRegistration:
    """A connection on which RegisterPlugin was sent and not yet answered: ``sock`` (blocking,
    connected: a :class:`socket.socket`, or the bare ``_socket.socket`` it is built on, which
    the event loop's transport wraps) and the ttrpc stream id of the request on the Runtime
    service conn."""

    sock: Any
    sid: int


def register_early(name: str, idx: str, *, socket_path: str | None = None,
                   fd: int | None = None, timeout: float = 10.0,
                   connect_timeout: float = 1.0) -> EarlyRegistration:
    """Connect to the runtime (``socket_path``) or take the launched plugin's socket (``fd``)
    and send RegisterPlugin(``name``, ``idx``) as stream 1 of the Runtime service conn,
    without waiting for the answer (Configure may come first: the event loop reads both).
    ``timeout``: seconds, sent as the request's deadline; ``connect_timeout``: seconds the
    connect and the write may block (a runtime that does not accept).

    Raises OSError when the socket cannot be reached or written (the caller then connects
    the usual way, with its retries), ValueError when neither or both of ``socket_path`` and
    ``fd`` are given.
    """
    if (socket_path is None) == (fd is None):
        raise ValueError("need exactly one of socket_path and fd")
    import socket  # (not at the top: ~12 M instructions, asyncio imports it later anyway)

    if fd is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=fd)
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # a runtime that does not accept (a full listen backlog) must not hang the start:
        # give up after ``connect_timeout`` and let the usual path report and retry
        sock.settimeout(connect_timeout)
        if socket_path is not None:
            sock.connect(socket_path)
        sid = 1  # a ttrpc client's first stream on a new connection
        sock.sendall(registration_bytes(name, idx, timeout, sid))
    except BaseException:
        if fd is None:
            sock.close()
        else:
            sock.detach()  # the runtime's socket stays open for the usual path to report
        raise
    sock.settimeout(None)
    return EarlyRegistration(sock, sid)


class LaunchEnvError(RuntimeError):
    """``NRI_PLUGIN_SOCKET`` is set (the runtime launched the plugin) but the launch
    variables are incomplete or malformed; the message says which and what to do."""


def launched_from_env() -> tuple[int, str, str]:
    """(socket fd, plugin name, plugin index) of a plugin the runtime launched, from
    ``NRI_PLUGIN_SOCKET``, ``NRI_PLUGIN_NAME`` and ``NRI_PLUGIN_IDX``. Raises
    :class:`LaunchEnvError` when they are missing or malformed."""
    sock = os.environ.get("NRI_PLUGIN_SOCKET")
    if sock is None:
        raise LaunchEnvError("not launched by an NRI runtime: NRI_PLUGIN_SOCKET is not set")
    missing = [k for k in ("NRI_PLUGIN_NAME", "NRI_PLUGIN_IDX") if not os.environ.get(k)]
    if missing:
        raise LaunchEnvError(
            f"NRI_PLUGIN_SOCKET is set (a plugin the runtime launched) but {' and '.join(missing)}"
            f" {'is' if len(missing) == 1 else 'are'} not: the runtime sets all three; to "
            "connect to the runtime's socket instead, unset NRI_PLUGIN_SOCKET")
    try:
        fd = int(sock)
    except ValueError:
        raise LaunchEnvError(
            f"NRI_PLUGIN_SOCKET={sock!r} is not a file descriptor number") from None
    if fd < 0:
        raise LaunchEnvError(f"NRI_PLUGIN_SOCKET={sock!r} is not a file descriptor number")
    return fd, os.environ["NRI_PLUGIN_NAME"], os.environ["NRI_PLUGIN_IDX"]
