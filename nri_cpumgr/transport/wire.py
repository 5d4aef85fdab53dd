"""The NRI wire format without an event loop: mux frames, ttrpc request messages, event masks,
and the first registration sent on a blocking socket.

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

import os
import socket
import struct
from dataclasses import dataclass

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


@dataclass
class EarlyRegistration:
    """A connection on which RegisterPlugin was sent and not yet answered: ``sock`` (blocking,
    connected) and the ttrpc stream id of the request on the Runtime service conn."""

    sock: socket.socket
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
