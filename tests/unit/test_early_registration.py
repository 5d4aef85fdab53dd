"""RegisterPlugin sent before the event loop (transport.wire.register_early) and handlers built
when first needed (Stub ``build_handlers``), against the in-process fake runtime (issue 9:
launch -> registered)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.transport.stub import Stub
from nri_cpumgr.transport.wire import (
    MAX_FRAME,
    mux_frames,
    register_early,
)

from .nri_peer import FRAME, FakeRuntime, RecordingHandlers


class Factory:
    """build_handlers that counts its calls and can fail."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls = 0
        self.handlers = RecordingHandlers()
        self.fail = fail

    def __call__(self) -> RecordingHandlers:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return self.handlers


def test_early_registration_is_the_sessions_registration(sock_path: Path) -> None:
    """One RegisterPlugin (stream 1), sent before the loop; the session then serves Configure
    and Synchronize, and its own calls continue at stream 3."""
    factory = Factory()

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            early = register_early("early", "07", socket_path=str(sock_path))
            assert early.sid == 1
            conn = await rt.next_conn()
            reg = await asyncio.wait_for(asyncio.shield(conn.registered), 5)
            assert (reg.plugin_name, reg.plugin_idx) == ("early", "07")
            assert factory.calls == 0  # registered before anything was built or even run
            stub = Stub(None, build_handlers=factory, name="early", idx="07",
                        socket_path=str(sock_path), early=early)
            task = asyncio.create_task(stub.run())
            try:
                events, _ = await conn.handshake(containers=[])
                assert events == stub.events & 0x7FF
                assert factory.calls == 1
                assert factory.handlers.calls[:2] == ["configure", "synchronize"]
                assert stub.registered and stub.sessions == 1
                failed = await stub.update_containers(nri_pb2.UpdateContainersRequest(
                    update=[nri_pb2.ContainerUpdate(container_id="c1")]).SerializeToString())
                assert failed == set()
                requests = [e for e in conn.log if e[0] == "request"]
                assert requests == [("request", "RegisterPlugin", "1"),
                                    ("request", "UpdateContainers", "3")]
                assert len(rt.all) == 1  # no second connection
            finally:
                stub.stop()
                await asyncio.wait_for(task, 5)

    asyncio.run(asyncio.wait_for(main(), 30))
    assert factory.calls == 1


def test_configure_before_the_registration_reply_builds_the_handlers(sock_path: Path) -> None:
    """A runtime may send Configure before answering RegisterPlugin (nri adaptation); with an
    early registration that Configure may already wait in the socket when the loop starts."""
    factory = Factory()
    seen: list[int] = []

    async def configure_first(conn, reg) -> None:
        cfg = await conn.call("Configure", nri_pb2.ConfigureRequest(runtime_name="fake"),
                              nri_pb2.ConfigureResponse)
        seen.append(cfg.events)

    async def main() -> None:
        async with FakeRuntime(sock_path, on_register=configure_first) as rt:
            early = register_early("early", "07", socket_path=str(sock_path))
            conn = await rt.next_conn()
            await asyncio.sleep(0.05)  # the runtime's Configure is in flight before the loop
            stub = Stub(None, build_handlers=factory, name="early", idx="07",
                        socket_path=str(sock_path), early=early)
            task = asyncio.create_task(stub.run())
            try:
                await asyncio.wait_for(asyncio.shield(conn.registered), 5)
                for _ in range(200):
                    if stub.registered:
                        break
                    await asyncio.sleep(0.01)
                assert stub.registered
                assert seen == [stub.events & 0x7FF]
                assert factory.calls == 1 and factory.handlers.calls == ["configure"]
            finally:
                stub.stop()
                await asyncio.wait_for(task, 5)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_failed_build_ends_run_with_its_error(sock_path: Path) -> None:
    """The build after the registration fails: the connection closes and run() raises the
    build's error."""
    factory = Factory(fail=ValueError("bad machine"))

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            stub = Stub(None, build_handlers=factory, name="early", idx="07",
                        socket_path=str(sock_path))
            task = asyncio.create_task(stub.run())
            conn = await rt.next_conn()
            with pytest.raises(ValueError, match="bad machine"):
                await asyncio.wait_for(task, 5)
            assert factory.calls == 1
            await asyncio.wait_for(conn.closed, 5)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_failed_build_is_reported_without_a_runtime(sock_path: Path) -> None:
    """Nobody listening: the build runs after the first failed attempt, and its error ends
    run() instead of a reconnect loop."""
    factory = Factory(fail=ValueError("bad machine"))

    async def main() -> None:
        stub = Stub(None, build_handlers=factory, name="early", idx="07",
                    socket_path=str(sock_path), backoff_initial=0.01)
        with pytest.raises(ValueError, match="bad machine"):
            await asyncio.wait_for(stub.run(), 5)

    asyncio.run(asyncio.wait_for(main(), 30))
    assert factory.calls == 1


def test_stub_takes_exactly_one_of_handlers_and_factory() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Stub(None, name="x", idx="10", socket_path="/nonexistent")
    with pytest.raises(ValueError, match="exactly one"):
        Stub(RecordingHandlers(), build_handlers=Factory(), name="x", idx="10",
             socket_path="/nonexistent")


def test_register_early_errors(sock_path: Path) -> None:
    with pytest.raises(OSError):
        register_early("x", "10", socket_path=str(sock_path))  # nobody listens there
    with pytest.raises(ValueError):
        register_early("x", "10")
    with pytest.raises(ValueError):
        register_early("x", "10", socket_path=str(sock_path), fd=5)
    r, w = socket.socketpair()
    fd = r.fileno()
    r.detach()
    os.close(fd)
    with pytest.raises(OSError):  # a closed descriptor, as a broken launch would give
        register_early("x", "10", fd=fd)
    w.close()


def test_register_early_on_a_launched_plugins_socket() -> None:
    """Launched mode: the runtime's end of a socketpair reads one mux frame on conn 2 holding
    the RegisterPlugin request."""
    from nri_cpumgr.api import ttrpc_pb2

    ours, runtime = socket.socketpair()
    try:
        fd = ours.detach()
        early = register_early("cpumgr", "90", fd=fd)
        conn_id, length = FRAME.unpack(runtime.recv(FRAME.size, socket.MSG_WAITALL))
        assert conn_id == 2 and 0 < length <= MAX_FRAME - FRAME.size
        data = runtime.recv(length, socket.MSG_WAITALL)
        mlen, sid, mtype = int.from_bytes(data[:4], "big"), int.from_bytes(data[4:8], "big"), \
            data[8]
        assert (mlen, sid, mtype) == (length - 10, 1, 1)
        req = ttrpc_pb2.Request.FromString(data[10:])
        assert (req.service, req.method) == ("nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin")
        assert req.timeout_nano == 10 * 10**9
        reg = nri_pb2.RegisterPluginRequest.FromString(req.payload)
        assert (reg.plugin_name, reg.plugin_idx) == ("cpumgr", "90")
        early.sock.close()
    finally:
        runtime.close()


def test_mux_frames_split_large_messages() -> None:
    msg = bytes(range(256)) * 40  # 10,240 bytes: three frames
    parts = mux_frames(2, msg)
    frames = b"".join(parts)
    out, pos, sizes = bytearray(), 0, []
    while pos < len(frames):
        conn_id, n = FRAME.unpack_from(frames, pos)
        assert conn_id == 2
        sizes.append(FRAME.size + n)
        out += frames[pos + FRAME.size:pos + FRAME.size + n]
        pos += FRAME.size + n
    assert bytes(out) == msg
    assert max(sizes) == MAX_FRAME and len(sizes) == 3
    assert mux_frames(1, b"abc") == (FRAME.pack(1, 3) + b"abc",)


def test_the_plugin_registers_before_loading_asyncio_and_the_managers(tmp_path: Path) -> None:
    """What the plugin has imported when its RegisterPlugin is on the wire: the generated API,
    not asyncio, the managers, the topology reader or the metrics (a subprocess: this test
    process has all of them loaded)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import sys, nri_cpumgr.transport.wire as w\n"
        "orig = w.register_early\n"
        "def spy(*a, **k):\n"
        "    r = orig(*a, **k)\n"
        "    print(' '.join(sorted(sys.modules)), flush=True)\n"
        "    raise SystemExit(0)\n"
        "w.register_early = spy\n"
        "from nri_cpumgr.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    (tmp_path / "c.yaml").write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    sock = socket.socket(socket.AF_UNIX)
    path = tempfile.mktemp(prefix="nri-p-", dir="/tmp")
    sock.bind(path)
    sock.listen()
    try:
        out = subprocess.run(
            [sys.executable, str(probe), "run", "--config", str(tmp_path / "c.yaml"),
             "--socket", path, "--state-dir", str(tmp_path / "s")],
            capture_output=True, text=True, timeout=60, check=True).stdout.split()
    finally:
        sock.close()
        os.unlink(path)
    assert "nri_cpumgr.transport.wire" in out
    # issue 34: the registration is encoded without protobuf, a flat config read without
    # PyYAML, and neither is imported before the RegisterPlugin is sent
    for heavy in ("asyncio", "nri_cpumgr.transport.stub", "nri_cpumgr.runtime.plugin",
                  "nri_cpumgr.cm.cpumanager", "nri_cpumgr.metrics", "nri_cpumgr.sysfs",
                  "nri_cpumgr.podmodel", "prometheus_client", "tenacity",
                  "nri_cpumgr.api.nri_pb2", "nri_cpumgr.api.ttrpc_pb2", "google.protobuf",
                  "yaml"):
        assert heavy not in out, heavy


@pytest.mark.parametrize(("name", "idx", "timeout"), [
    ("cpumgr", "90", 10.0), ("x", "00", 0.0), ("a" * 300, "07", 2.5), ("", "", 1e-9)])
def test_register_request_is_what_protobuf_serializes(name: str, idx: str,
                                                      timeout: float) -> None:
    """The hand-encoded registration (no protobuf import before it is sent) is byte for
    byte protobuf's, and parses back to the same fields (a name over 127 bytes: a two-byte
    length)."""
    from nri_cpumgr.api import ttrpc_pb2
    from nri_cpumgr.transport.wire import RUNTIME_SERVICE, register_request, ttrpc_request

    payload = nri_pb2.RegisterPluginRequest(plugin_name=name,
                                            plugin_idx=idx).SerializeToString()
    want = ttrpc_request(RUNTIME_SERVICE, "RegisterPlugin", payload, timeout=timeout)
    got = register_request(name, idx, timeout)
    assert got == want
    req = ttrpc_pb2.Request.FromString(got)
    assert (req.service, req.method, req.timeout_nano) == (
        RUNTIME_SERVICE, "RegisterPlugin", int(timeout * 1e9))
    back = nri_pb2.RegisterPluginRequest.FromString(req.payload)
    assert (back.plugin_name, back.plugin_idx) == (name, idx)


def test_configure_is_answered_before_the_build() -> None:
    """Configure's answer does not wait for the deferred build: the handler answers at once,
    the build and the handlers' Configure run right after the reply went out (the server's
    after-reply hook, before the next request is read: Synchronize finds them built)."""
    from nri_cpumgr.transport.wire import PLUGIN_SERVICE

    factory = Factory()

    async def main() -> None:
        stub = Stub(None, build_handlers=factory, name="early", idx="07",
                    socket_path="/nonexistent")
        configure = stub._methods[(PLUGIN_SERVICE, "Configure")]
        answer = nri_pb2.ConfigureResponse.FromString(configure(nri_pb2.ConfigureRequest(
            runtime_name="fake", runtime_version="0.0").SerializeToString()))
        assert answer.events == stub.events & 0x7FF
        assert factory.calls == 0 and factory.handlers.calls == []
        stub._after_reply()  # (what the ttrpc server calls once the answer is written)
        assert factory.calls == 1 and factory.handlers.calls == ["configure"]
        assert factory.handlers.configs[0].runtime_name == "fake"
        stub._after_reply()  # (once only)
        sync = stub._methods[(PLUGIN_SERVICE, "Synchronize")]
        sync(nri_pb2.SynchronizeRequest().SerializeToString())
        assert factory.calls == 1 and factory.handlers.calls == ["configure", "synchronize"]

    asyncio.run(main())


def test_a_build_failing_after_configure_ends_run_with_its_error(sock_path: Path) -> None:
    """Configure was answered (the build runs after its reply); the build's failure then
    closes the connection and run() raises it, as a failure inside Configure did."""
    factory = Factory(fail=ValueError("bad machine"))
    answers: list[object] = []

    async def configure_first(conn, reg) -> None:
        try:
            answers.append(await conn.call("Configure", nri_pb2.ConfigureRequest(
                runtime_name="fake"), nri_pb2.ConfigureResponse))
        except Exception as e:  # noqa: BLE001 - recorded for the assertion
            answers.append(e)

    async def main() -> None:
        async with FakeRuntime(sock_path, on_register=configure_first) as rt:
            early = register_early("early", "07", socket_path=str(sock_path))
            conn = await rt.next_conn()
            await asyncio.sleep(0.05)  # the runtime's Configure is in flight before the loop
            stub = Stub(None, build_handlers=factory, name="early", idx="07",
                        socket_path=str(sock_path), early=early)
            with pytest.raises(ValueError, match="bad machine"):
                await asyncio.wait_for(stub.run(), 5)
            assert factory.calls == 1
            await asyncio.wait_for(conn.closed, 5)
            assert [type(a) for a in answers] == [nri_pb2.ConfigureResponse]

    asyncio.run(asyncio.wait_for(main(), 30))
