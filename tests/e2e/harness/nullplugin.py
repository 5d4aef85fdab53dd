"""A do-nothing external NRI plugin, to prove the harness and measure the bare NRI round trip.

It speaks just enough of the wire protocol (docs/nri-protocol.md): the mux
(``conn_id u32 BE | length u32 BE | payload``, frames <= 4096 bytes), ttrpc framing
(``length u32 | stream_id u32 | type u8 | flags u8``), RegisterPlugin on conn 2 and an empty
success answer to every request on conn 1 (Configure answers with the ``--events`` mask).
Protobuf fields are hand-encoded; no generated code is needed. Not the project's plugin.

Usage: ``python3 -m tests.e2e.harness.nullplugin --socket NRI_SOCK [--name null] [--idx 90]
[--events MASK] [--delay-ms N --delay-on METHOD] [--record DIR]``. Logs one line per request on
stdout. With ``--record DIR`` it also writes each request's payload (the method's protobuf
request message, e.g. ``CreateContainerRequest``) to ``DIR/<seq>-<Method>.bin``, as received:
decode it with the NRI schema (tests/cluster records what a real kubelet's pods look like to a
plugin that way).
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import time

MAX_FRAME = 4096
PLUGIN_CONN, RUNTIME_CONN = 1, 2
T_REQUEST, T_RESPONSE = 1, 2


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field_bytes(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def _field_varint(num: int, value: int) -> bytes:
    return _varint(num << 3) + _varint(value)


def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, i
        shift += 7


def parse_fields(buf: bytes) -> dict[int, bytes | int]:
    """Top-level fields of a protobuf message (last occurrence wins; groups unsupported)."""
    out: dict[int, bytes | int] = {}
    i = 0
    while i < len(buf):
        key, i = _read_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            out[num], i = _read_varint(buf, i)
        elif wt == 2:
            ln, i = _read_varint(buf, i)
            out[num] = buf[i:i + ln]
            i += ln
        elif wt == 1:
            out[num] = buf[i:i + 8]
            i += 8
        elif wt == 5:
            out[num] = buf[i:i + 4]
            i += 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
    return out


class NullPlugin:
    """Registers as ``<idx>-<name>`` and answers every runtime request with success."""

    def __init__(self, sock_path: str, name: str, idx: str, events: int, delay: float,
                 delay_on: str = "CreateContainer", record: str | None = None) -> None:
        self.record, self.seq = record, 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(sock_path)
        self.name, self.idx, self.events, self.delay = name, idx, events, delay
        self.delay_on = delay_on
        self.bufs: dict[int, bytearray] = {PLUGIN_CONN: bytearray(), RUNTIME_CONN: bytearray()}

    def send(self, conn: int, stream: int, mtype: int, payload: bytes) -> None:
        msg = struct.pack(">IIBB", len(payload), stream, mtype, 0) + payload
        for off in range(0, len(msg), MAX_FRAME):
            chunk = msg[off:off + MAX_FRAME]
            self.sock.sendall(struct.pack(">II", conn, len(chunk)) + chunk)

    def recv_exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return bytes(data)

    def run(self) -> int:
        register = (_field_bytes(1, self.name.encode()) + _field_bytes(2, self.idx.encode()))
        req = (_field_bytes(1, b"nri.pkg.api.v1alpha1.Runtime")
               + _field_bytes(2, b"RegisterPlugin") + _field_bytes(3, register))
        self.send(RUNTIME_CONN, 1, T_REQUEST, req)
        log(f"sent RegisterPlugin {self.idx}-{self.name}")
        try:
            while True:
                conn, length = struct.unpack(">II", self.recv_exact(8))
                payload = self.recv_exact(length)
                if conn not in self.bufs:
                    continue
                buf = self.bufs[conn]
                buf += payload
                while len(buf) >= 10:
                    ln, stream, mtype, _flags = struct.unpack(">IIBB", buf[:10])
                    if len(buf) < 10 + ln:
                        break
                    body = bytes(buf[10:10 + ln])
                    del buf[:10 + ln]
                    self.handle(conn, stream, mtype, body)
        except (EOFError, ConnectionError) as e:
            log(f"connection closed by the runtime ({type(e).__name__})")
            return 0

    def handle(self, conn: int, stream: int, mtype: int, body: bytes) -> None:
        if conn == RUNTIME_CONN and mtype == T_RESPONSE:
            status = parse_fields(body).get(1, b"")
            code = parse_fields(status).get(1, 0) if isinstance(status, bytes) else 0
            log(f"registered (status code {code})")
            return
        if conn != PLUGIN_CONN or mtype != T_REQUEST:
            return
        f = parse_fields(body)
        method = f.get(2, b"")
        method = method.decode() if isinstance(method, bytes) else str(method)
        if self.record:
            self.seq += 1
            payload = f.get(3, b"")
            path = os.path.join(self.record, f"{self.seq:05d}-{method}.bin")
            with open(path + ".tmp", "wb") as out:
                out.write(payload if isinstance(payload, bytes) else b"")
            os.rename(path + ".tmp", path)
        if self.delay and method == self.delay_on:
            log(f"delaying {method} by {self.delay}s")
            time.sleep(self.delay)
        reply = b""
        if method == "Configure":
            # ConfigureResponse.events is field 2 (nri api.proto)
            reply = _field_varint(2, self.events) if self.events else b""
        self.send(PLUGIN_CONN, stream, T_RESPONSE, _field_bytes(2, reply) if reply else b"")
        if method == "Synchronize":
            log("synchronized")
        else:
            log(f"answered {method}")


def log(msg: str) -> None:
    print(f"nullplugin: {msg}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="do-nothing external NRI plugin")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--name", default="null")
    ap.add_argument("--idx", default="90")
    ap.add_argument("--events", type=lambda s: int(s, 0), default=0,
                    help="event subscription mask (0 = all the runtime has)")
    ap.add_argument("--delay-ms", type=float, default=0.0,
                    help="delay before answering --delay-on requests")
    ap.add_argument("--delay-on", default="CreateContainer", help="ttrpc method name to delay")
    ap.add_argument("--record", help="write each request's payload to DIR/<seq>-<Method>.bin")
    a = ap.parse_args(argv)
    return NullPlugin(a.socket, a.name, a.idx, a.events, a.delay_ms / 1000, a.delay_on,
                      a.record).run()


if __name__ == "__main__":
    sys.exit(main())
