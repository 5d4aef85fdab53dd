"""Mux and ttrpc layers on their own: framing, reassembly, bounds, late answers, overhead."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from nri_cpumgr.api import nri_pb2, ttrpc_pb2
from nri_cpumgr.transport.mux import MAX_FRAME, Mux
from nri_cpumgr.transport.stub import PLUGIN_SERVICE, Stub
from nri_cpumgr.transport.ttrpc import Client, Server, TtrpcError

from .nri_peer import FRAME, MSG, RecordingHandlers

MSG_HDR = struct.Struct(">IIBB")


class FakeTransport:
    """Collects writes; enough of asyncio.Transport for Mux."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.out += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = self.aborted = True


def frames_of(data: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    while pos < len(data):
        cid, n = FRAME.unpack_from(data, pos)
        out.append((cid, data[pos + 8:pos + 8 + n]))
        pos += 8 + n
    return out


class Sink:
    def __init__(self) -> None:
        self.data = bytearray()
        self.lost: list[object] = []

    def feed(self, data: memoryview) -> None:
        self.data += data

    def connection_lost(self, exc: BaseException | None) -> None:
        self.lost.append(exc)


def make_mux(max_frame_in: int = 64 << 20) -> tuple[Mux, FakeTransport]:
    mux = Mux(max_frame_in=max_frame_in)
    tr = FakeTransport()
    asyncio.run(_connect(mux, tr))
    return mux, tr


async def _connect(mux: Mux, tr: FakeTransport) -> None:
    mux.connection_made(tr)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, 1, 4087, 4088, 4089, 100_000, 1_000_003])
def test_send_splits_into_frames_of_at_most_4096(size: int) -> None:
    mux, tr = make_mux()
    msg = bytes(i % 251 for i in range(size))
    assert mux.send(1, msg)
    mux.send(2, b"next")  # a second message never shares a frame with the first
    frames = frames_of(bytes(tr.out))
    assert all(len(p) + 8 <= MAX_FRAME for _, p in frames)
    assert frames[-1] == (2, b"next")
    assert b"".join(p for _, p in frames[:-1]) == msg
    assert all(c == 1 for c, _ in frames[:-1])
    assert len(frames) - 1 == max(1, -(-size // (MAX_FRAME - 8)))


@pytest.mark.parametrize("chunk", [1, 7, 4096, 65536, None])
def test_reassembly_of_frames_of_any_size(chunk: int | None) -> None:
    """A 4096-byte frame, then one 6 MB frame, then small frames, fed in arbitrary pieces."""
    mux, tr = make_mux()
    sink, other = Sink(), Sink()
    mux.open(1, sink)
    mux.open(2, other)
    big = bytes(range(256)) * (6 * 4096)
    wire = (FRAME.pack(1, 4096) + big[:4096] + FRAME.pack(1, len(big) - 4096) + big[4096:]
            + FRAME.pack(9, 3) + b"xyz" + FRAME.pack(2, 2) + b"ok" + FRAME.pack(1, 0))
    step = chunk or len(wire)
    if chunk == 1:  # byte by byte over 6 MB is slow; only the first and last 20 kB that way
        pieces = [wire[i:i + 1] for i in range(20000)] + [wire[20000:-20000]] + [
            wire[i:i + 1] for i in range(len(wire) - 20000, len(wire))]
    else:
        pieces = [wire[i:i + step] for i in range(0, len(wire), step)]
    for p in pieces:
        mux.data_received(p)
    assert bytes(sink.data) == big
    assert bytes(other.data) == b"ok"
    assert not mux.closed and not tr.closed


def test_absurd_frame_length_closes_without_buffering() -> None:
    mux, tr = make_mux(max_frame_in=1 << 20)
    sink = Sink()
    mux.open(1, sink)
    mux.data_received(FRAME.pack(1, (1 << 20) + 1) + b"\x00" * 100)
    assert mux.closed and tr.aborted
    assert len(mux._buf) == 0 and sink.lost != []
    assert not mux.send(1, b"late")  # nothing is written to a closed connection
    mux.data_received(b"\x00" * 1000)  # ignored after close
    assert len(mux._buf) == 0


def test_large_frame_does_not_parse_per_chunk() -> None:
    """While a large frame arrives, each chunk only appends (no quadratic re-scans)."""
    mux, _ = make_mux()
    sink = Sink()
    mux.open(1, sink)
    n = 8 << 20
    mux.data_received(FRAME.pack(1, n))
    chunk = b"\x01" * 65536
    t0 = time.perf_counter()
    for _ in range(n // len(chunk)):
        mux.data_received(chunk)
    elapsed = time.perf_counter() - t0
    assert len(sink.data) == n
    assert elapsed < 0.5, elapsed


def _request(sid: int, method: str, payload: bytes, service: str = PLUGIN_SERVICE) -> bytes:
    data = ttrpc_pb2.Request(service=service, method=method, payload=payload).SerializeToString()
    return MSG_HDR.pack(len(data), sid, 1, 0) + data


def _responses(out: bytes) -> dict[int, ttrpc_pb2.Response]:
    stream = b"".join(p for _, p in frames_of(out))
    res, pos = {}, 0
    while pos < len(stream):
        n, sid, mtype, _ = MSG_HDR.unpack_from(stream, pos)
        assert mtype == 2
        res[sid] = ttrpc_pb2.Response.FromString(stream[pos + 10:pos + 10 + n])
        pos += 10 + n
    return res


def test_ttrpc_message_split_across_frames_and_two_in_one_frame() -> None:
    mux, tr = make_mux()
    Server(mux, 1, {(PLUGIN_SERVICE, "Echo"): lambda p: p[::-1]})
    wire = _request(1, "Echo", b"abc") + _request(3, "Echo", b"xyz" * 5000)
    # first: both messages in one frame; then the same split at awkward points
    mux.data_received(FRAME.pack(1, len(wire)) + wire)
    wire2 = _request(5, "Echo", b"123") + _request(7, "Echo", b"q")
    for cut in (3, 11, 20):
        mux.data_received(FRAME.pack(1, cut) + wire2[:cut])
        wire2 = wire2[cut:]
    mux.data_received(FRAME.pack(1, len(wire2)) + wire2)
    res = _responses(bytes(tr.out))
    assert {sid: r.payload for sid, r in res.items()} == {
        1: b"cba", 3: (b"xyz" * 5000)[::-1], 5: b"321", 7: b"q"}


def test_server_status_codes() -> None:
    mux, tr = make_mux()

    def fails(p: bytes) -> bytes:
        raise TtrpcError(9, "precondition")

    def crashes(p: bytes) -> bytes:
        raise RuntimeError("handler bug")

    Server(mux, 1, {(PLUGIN_SERVICE, "Fails"): fails, (PLUGIN_SERVICE, "Crashes"): crashes})
    for sid, method in [(1, "Fails"), (3, "Crashes"), (5, "Nope"), (4, "Fails"), (1, "Fails")]:
        msg = _request(sid, method, b"")
        mux.data_received(FRAME.pack(1, len(msg)) + msg)
    stream_frames = frames_of(bytes(tr.out))
    assert len(stream_frames) == 5
    stream = b"".join(p for _, p in stream_frames)
    got, pos = [], 0
    while pos < len(stream):
        n, sid, _, _ = MSG_HDR.unpack_from(stream, pos)
        st = ttrpc_pb2.Response.FromString(stream[pos + 10:pos + 10 + n]).status
        got.append((sid, st.code, st.message))
        pos += 10 + n
    codes = [(sid, code) for sid, code, _ in got]
    assert got[0][2] == "precondition" and got[1][2] == "handler bug"
    assert "Nope" in got[2][2]
    assert codes == [(1, 9), (3, 2), (5, 12), (4, 3), (1, 3)]


def test_late_answer_not_written_to_new_connection() -> None:
    """An answer finishing after its socket died is dropped; the new socket never sees it."""

    async def main() -> None:
        release = asyncio.Event()
        done: list[str] = []

        async def slow(p: bytes) -> bytes:
            await release.wait()
            done.append("slow")
            return b"late"

        methods = {(PLUGIN_SERVICE, "Slow"): slow, (PLUGIN_SERVICE, "Fast"): lambda p: b"fast"}
        loop = asyncio.get_running_loop()
        a_ours, a_peer = socket.socketpair()
        mux_a = Mux()
        await loop.create_unix_connection(lambda: mux_a, sock=a_ours)
        Server(mux_a, 1, methods)
        a_peer.sendall(FRAME.pack(1, len(_request(1, "Slow", b""))) + _request(1, "Slow", b""))
        await asyncio.sleep(0.05)
        a_peer.close()  # runtime went away while the handler was busy
        await asyncio.wait_for(mux_a.lost, 2)

        b_ours, b_peer = socket.socketpair()
        b_peer.setblocking(False)
        mux_b = Mux()
        await loop.create_unix_connection(lambda: mux_b, sock=b_ours)
        Server(mux_b, 1, methods)
        release.set()
        await asyncio.sleep(0.05)
        assert done == ["slow"]
        with pytest.raises(BlockingIOError):
            b_peer.recv(65536)  # nothing arrived on the new connection
        req = _request(1, "Fast", b"")
        b_peer.sendall(FRAME.pack(1, len(req)) + req)
        await asyncio.sleep(0.05)
        got = b_peer.recv(65536)
        assert _responses(got)[1].payload == b"fast"
        mux_b.close()
        b_peer.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_client_ids_and_errors_over_socketpair() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        c_sock, s_sock = socket.socketpair()
        cm, sm = Mux(), Mux()
        await loop.create_unix_connection(lambda: cm, sock=c_sock)
        await loop.create_unix_connection(lambda: sm, sock=s_sock)
        seen: list[int] = []

        def echo(p: bytes) -> bytes:
            return p

        def refuse(p: bytes) -> bytes:
            raise TtrpcError(2, "nope")

        server = Server(sm, 2, {("S", "Echo"): echo, ("S", "Refuse"): refuse})
        orig = server._message

        def spy(sid: int, mtype: int, flags: int, data: bytes) -> None:
            seen.append(sid)
            orig(sid, mtype, flags, data)

        server._message = spy  # type: ignore[method-assign]
        client = Client(cm, 2)
        assert await client.call("S", "Echo", b"1", timeout=2) == b"1"
        assert await client.call("S", "Echo", b"2" * 200_000, timeout=2) == b"2" * 200_000
        with pytest.raises(TtrpcError) as err:
            await client.call("S", "Refuse", b"", timeout=2)
        assert (err.value.code, err.value.message) == (2, "nope")
        with pytest.raises(TtrpcError) as err:
            await client.call("S", "Missing", b"", timeout=2)
        assert err.value.code == 12
        assert seen == [1, 3, 5, 7]
        pending = asyncio.ensure_future(client.call("S", "Echo", b"x"))
        sm.close()
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(pending, 2)
        with pytest.raises(ConnectionError):
            await client.call("S", "Echo", b"y")
        cm.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_create_container_overhead_under_300us() -> None:
    """Python cost of one CreateContainer round trip through mux + ttrpc + stub dispatch,
    excluding the handler (trivial here), with a realistic request (nri-examples size)."""
    h = RecordingHandlers()
    h.create_response.adjust.linux.resources.cpu.cpus = "2-3"
    stub = Stub(h, name="bench", idx="10", socket_path="/nonexistent")
    mux, tr = make_mux()
    Server(mux, 1, stub._methods, after_reply=stub._after_reply)
    req = nri_pb2.CreateContainerRequest()
    req.pod.id = "f" * 64
    for i in range(8):
        req.pod.labels[f"io.kubernetes.label{i}"] = "v" * 40
        req.pod.annotations[f"io.kubernetes.annotation{i}"] = "v" * 60
        req.container.labels[f"io.kubernetes.label{i}"] = "v" * 40
        req.container.annotations[f"io.kubernetes.annotation{i}"] = "v" * 60
    req.container.env.extend([f"VAR{i}=value{i}" for i in range(20)])
    req.container.args.extend(["/bin/sleep", "inf"])
    for i in range(10):
        req.container.mounts.add(destination=f"/m{i}", type="bind", source=f"/src/{i}" * 4)
    payload = req.SerializeToString()
    assert len(payload) > 2000
    n = 2000
    wires = []
    for i in range(n):
        data = ttrpc_pb2.Request(service=PLUGIN_SERVICE, method="CreateContainer",
                                 payload=payload, timeout_nano=2_000_000_000).SerializeToString()
        msg = MSG.pack(len(data), 2 * i + 1, 1, 0) + data
        wires.append(FRAME.pack(1, len(msg)) + msg)
    t0 = time.perf_counter()
    for w in wires:
        mux.data_received(w)
    per_call = (time.perf_counter() - t0) / n
    assert h.calls.count("create_container") == n
    res = _responses(bytes(tr.out))
    assert nri_pb2.CreateContainerResponse.FromString(res[2 * n - 1].payload) == h.create_response
    assert per_call < 300e-6, f"{per_call * 1e6:.0f} us per CreateContainer"


def test_views_kept_alive_by_a_sink_do_not_break_the_next_read() -> None:
    """A handler's exception traceback can keep the frames (and their memoryview slices of
    the receive buffers) alive until the garbage collector runs; the next read must not try
    to resize an exported buffer (seen on containerd: BufferError after a refused create)."""
    import struct

    from nri_cpumgr.transport.mux import Mux

    kept: list[memoryview] = []

    class Sink:
        def __init__(self) -> None:
            self.got: list[bytes] = []

        def feed(self, data: memoryview) -> None:
            kept.append(data)  # what a leaked traceback frame does
            self.got.append(bytes(data))

        def connection_lost(self, exc: BaseException | None) -> None:
            pass

    mux = Mux()
    sink = Sink()
    mux.open(1, sink)

    def frame(payload: bytes) -> bytes:
        return struct.pack(">II", 1, len(payload)) + payload

    stream = frame(b"a" * 10) + frame(b"b" * 20) + frame(b"c" * 5)
    # split mid-frame so the slow path (own buffer) is used, then keep feeding
    mux.data_received(stream[:3])
    mux.data_received(stream[3:25])
    mux.data_received(stream[25:])
    mux.data_received(frame(b"d" * 7)[:4])
    mux.data_received(frame(b"d" * 7)[4:])
    assert sink.got == [b"a" * 10, b"b" * 20, b"c" * 5, b"d" * 7]
    assert not mux.closed
    assert kept  # the views really were kept alive during the later reads


@pytest.mark.parametrize("size", [0, 1, 127, 128, 300, 16383, 16384, 2**21, 4 << 20])
def test_an_ok_response_is_what_protobuf_writes(size):
    """The server's hand-built success answer (issue 34: no two messages built per reply)
    is byte for byte ``Response(status=Status(), payload=...)`` serialized, and reads back."""
    from nri_cpumgr.transport.ttrpc import ok_response

    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    want = ttrpc_pb2.Response(status=ttrpc_pb2.Status(), payload=payload).SerializeToString()
    assert ok_response(payload) == want
    back = ttrpc_pb2.Response.FromString(ok_response(payload))
    assert back.HasField("status") and back.status.code == 0 and back.payload == payload


def test_a_malformed_ttrpc_request_is_refused_with_invalid_argument_and_serving_goes_on():
    """(the request types are imported at the first request and kept: wire._parsed)"""
    from nri_cpumgr.transport.wire import UnaryServer

    calls = []
    server = UnaryServer({("svc", "M"): lambda payload: calls.append(payload) or b"ok"})
    method, answer = server.receive(1, b"\x0a\xff\xff\xff")  # (a length past the end)
    resp = ttrpc_pb2.Response.FromString(answer)
    assert (method, resp.status.code) == ("", 3)  # InvalidArgument
    assert resp.status.message.startswith("malformed ttrpc request: ")
    good = ttrpc_pb2.Request(service="svc", method="M", payload=b"x").SerializeToString()
    method, answer = server.receive(3, good)
    assert method == "M" and calls == [b"x"]
    assert ttrpc_pb2.Response.FromString(answer).payload == b"ok"
