"""The RegisterPlugin message on the wire, encoded with builtins alone (no ``struct``,
``socket`` or protobuf import): :mod:`nri_cpumgr.boot` sends it before anything else of the
plugin is loaded, :mod:`.wire` re-exports it for the transport (issue 34, launch ->
registered).

Wire rules (containerd/nri pkg/net/multiplex, containerd/ttrpc; ../shared/docs/nri-protocol.md):
a mux frame is ``conn_id u32 BE | length u32 BE | payload``; a ttrpc message is
``length u32 BE | stream_id u32 BE | type u8 | flags u8 | data``; field numbers from
proto/ttrpc.proto (Request: service 1, method 2, payload 3, timeout_nano 4) and proto/nri.proto
(RegisterPluginRequest: plugin_name 1, plugin_idx 2).
"""

from __future__ import annotations

RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
#: conn 2 of the mux carries the Runtime service (the plugin calls it).
RUNTIME_SERVICE_CONN = 2
TYPE_REQUEST = 1


def _pb_varint(n: int) -> bytes:
    """``n`` (>= 0) as a protobuf base-128 varint."""
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _pb_field(number: int, value: str | bytes | int) -> bytes:
    """One protobuf field in proto3 encoding: ``value`` a string or bytes (wire type 2) or a
    non-negative int (wire type 0); nothing for the default ("", b"", 0), as protobuf writes
    proto3 scalars."""
    if isinstance(value, int):
        return _pb_varint(number << 3) + _pb_varint(value) if value else b""
    data = value.encode() if isinstance(value, str) else value
    return _pb_varint(number << 3 | 2) + _pb_varint(len(data)) + data if data else b""


def register_request(name: str, idx: str, timeout: float) -> bytes:
    """The serialized ``ttrpc.Request`` carrying ``RegisterPluginRequest(plugin_name=name,
    plugin_idx=idx)`` to the Runtime service, ``timeout`` seconds as its ``timeout_nano``:
    byte for byte what protobuf serializes (tests/unit/test_early_registration.py compares
    them), encoded here so that the plugin registers before protobuf is imported."""
    payload = _pb_field(1, name) + _pb_field(2, idx)
    return (_pb_field(1, RUNTIME_SERVICE) + _pb_field(2, "RegisterPlugin")
            + _pb_field(3, payload) + _pb_field(4, int(timeout * 1e9)))


def registration_bytes(name: str, idx: str, timeout: float, sid: int = 1) -> bytes:
    """RegisterPlugin(``name``, ``idx``) as ttrpc request stream ``sid`` on the Runtime
    service conn, in mux frames (one frame unless the name is kilobytes long: each at most
    4096 bytes with its header, as the runtime reads them): the bytes to write."""
    req = register_request(name, idx, timeout)
    msg = (len(req).to_bytes(4, "big") + sid.to_bytes(4, "big")
           + bytes((TYPE_REQUEST, 0)) + req)
    out = []
    for off in range(0, len(msg), 4088):
        chunk = msg[off:off + 4088]
        out.append(RUNTIME_SERVICE_CONN.to_bytes(4, "big") + len(chunk).to_bytes(4, "big"))
        out.append(chunk)
    return b"".join(out)
