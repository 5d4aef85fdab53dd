"""Configure and Synchronize answered on the blocking socket before the event loop
(transport.firstreqs, Stub.serve_first_requests), then the session handed to the event loop,
against the in-process fake runtime (issue 34: launch -> synchronized).

The blocking server runs in a worker thread (``asyncio.to_thread``) while the fake runtime
runs on this thread's event loop, as the plugin process and containerd run side by side.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from nri_cpumgr import aio
from nri_cpumgr.api import nri_pb2, ttrpc_pb2
from nri_cpumgr.transport.stub import Stub
from nri_cpumgr.transport.wire import register_early

from .nri_peer import FRAME, MSG, PLUGIN, FakeRuntime, PeerConn, RecordingHandlers


class Factory:
    """build_handlers counting its calls and the thread it ran on."""

    def __init__(self, handlers: RecordingHandlers | None = None) -> None:
        self.calls = 0
        self.handlers = handlers or RecordingHandlers()
        self.thread: int | None = None

    def __call__(self) -> RecordingHandlers:
        self.calls += 1
        self.thread = threading.get_ident()
        return self.handlers


def _stub(path: Path, factory: Factory, **kw: object) -> Stub:
    early = register_early("first", "07", socket_path=str(path))
    return Stub(None, build_handlers=factory, name="first", idx="07", socket_path=str(path),
                early=early, **kw)  # type: ignore[arg-type]


def _serve(stub: Stub, wait: float = 5.0) -> asyncio.Future[str]:
    return asyncio.ensure_future(asyncio.to_thread(stub.serve_first_requests, wait))


def _pods(n: int, start: int = 0) -> tuple[list[nri_pb2.PodSandbox], list[nri_pb2.Container]]:
    pods = [nri_pb2.PodSandbox(id=f"p{i}", uid=f"u{i}") for i in range(start, start + n)]
    ctrs = [nri_pb2.Container(id=f"c{i}", pod_sandbox_id=f"p{i}") for i in range(start, start + n)]
    return pods, ctrs


def _request_bytes(sid: int, method: str, msg: object) -> bytes:
    data = ttrpc_pb2.Request(service=PLUGIN, method=method,
                             payload=msg.SerializeToString()).SerializeToString()  # type: ignore[attr-defined]
    body = MSG.pack(len(data), sid, 1, 0) + data
    return FRAME.pack(1, len(body)) + body


def _expect(conn: PeerConn, sid: int) -> asyncio.Future[ttrpc_pb2.Response]:
    fut: asyncio.Future[ttrpc_pb2.Response] = asyncio.get_running_loop().create_future()
    conn._pending[sid] = fut
    return fut


async def _configured(rt: FakeRuntime) -> PeerConn:
    """The runtime's next connection, once the plugin registered on it and Configure was
    answered."""
    conn = await rt.next_conn()
    await asyncio.wait_for(asyncio.shield(conn.registered), 5)
    await conn.call("Configure", nri_pb2.ConfigureRequest(runtime_name="fake"),
                    nri_pb2.ConfigureResponse)
    return conn


async def _finish(stub: Stub, run: asyncio.Future[None]) -> None:
    stub.stop()
    await asyncio.wait_for(run, 5)


def test_configure_after_the_registration_reply(sock_path: Path) -> None:
    """The usual order: the reply, Configure, Synchronize, all answered before the event loop
    (the build right after Configure's answer, on the blocking side); the loop then serves
    the next request on the same connection, with the stream ids going on (a reused one is
    refused) and its own calls numbered after the registration."""
    factory = Factory()

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            stub = _stub(sock_path, factory)
            serving = _serve(stub)
            conn = await rt.next_conn()
            pods, ctrs = _pods(3)
            events, sync = await conn.handshake(pods=pods, containers=ctrs)
            assert await serving == "synchronized"
            assert "asyncio" in sys.modules  # (this test process: the thread is the point)
            assert factory.calls == 1 and factory.thread != threading.get_ident()
            assert factory.handlers.calls == ["configure", "synchronize"]
            assert factory.handlers.syncs == [(["p0", "p1", "p2"], ["c0", "c1", "c2"])]
            assert events == stub.events & 0x7FF
            assert stub.registered and stub.runtime_name == "fake"
            assert stub._handover is not None and stub._handover.served == 2
            assert stub._handover.preface == b""
            run = asyncio.ensure_future(stub.run())
            await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(),
                            nri_pb2.CreateContainerResponse)
            assert factory.handlers.calls[-1] == "create_container"
            reused = await conn.call_raw("CreateContainer", b"", sid=3)
            assert reused.status.code == 3 and "reused" in reused.status.message
            while stub._client is None:
                await asyncio.sleep(0.01)
            await stub.update_containers(nri_pb2.UpdateContainersRequest().SerializeToString())
            assert ("request", "UpdateContainers", "3") in conn.log
            assert [e for e in conn.log if e[0] == "request"][0] == \
                ("request", "RegisterPlugin", "1")
            assert stub.sessions == 1
            await _finish(stub, run)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_configure_before_the_registration_reply(sock_path: Path) -> None:
    """The runtime sends Configure before it answers RegisterPlugin: answered on the blocking
    socket all the same; the reply taken whenever it comes (here after Configure, before
    Synchronize)."""
    factory = Factory()
    seen: list[int] = []

    async def configure_first(conn: PeerConn, reg: nri_pb2.RegisterPluginRequest) -> None:
        cfg = await conn.call("Configure", nri_pb2.ConfigureRequest(
            runtime_name="fake", runtime_version="9", request_timeout=3000),
            nri_pb2.ConfigureResponse)
        seen.append(cfg.events)

    async def main() -> None:
        async with FakeRuntime(sock_path, on_register=configure_first) as rt:
            stub = _stub(sock_path, factory)
            serving = _serve(stub)
            conn = await rt.next_conn()
            await asyncio.wait_for(asyncio.shield(conn.registered), 5)
            assert seen == [stub.events & 0x7FF]
            assert not stub.registered or factory.calls == 1
            await conn.call("Synchronize", nri_pb2.SynchronizeRequest(),
                            nri_pb2.SynchronizeResponse)
            assert await serving == "synchronized"
            assert stub.registered and stub.request_timeout_ms == 3000
            assert stub._handover is not None and stub._handover.served == 2
            assert factory.handlers.calls == ["configure", "synchronize"]
            run = asyncio.ensure_future(stub.run())
            await conn.call("StopContainer", nri_pb2.StopContainerRequest(),
                            nri_pb2.StopContainerResponse)
            assert factory.handlers.calls[-1] == "stop_container"
            await _finish(stub, run)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_the_registration_reply_after_synchronize_goes_to_the_loop(sock_path: Path) -> None:
    """A reply that has not come when Synchronize is answered: the event loop waits for it as
    for any early registration."""
    factory = Factory()

    async def main() -> None:
        gate = asyncio.Event()

        async def hold(conn: PeerConn, reg: nri_pb2.RegisterPluginRequest) -> None:
            await conn.call("Configure", nri_pb2.ConfigureRequest(runtime_name="fake"),
                            nri_pb2.ConfigureResponse)
            await conn.call("Synchronize", nri_pb2.SynchronizeRequest(),
                            nri_pb2.SynchronizeResponse)
            await gate.wait()

        async with FakeRuntime(sock_path, on_register=hold) as rt:
            stub = _stub(sock_path, factory)
            serving = _serve(stub)
            await rt.next_conn()
            assert await serving == "synchronized"
            assert not stub.registered and not stub._handover.registered  # type: ignore[union-attr]
            run = asyncio.ensure_future(stub.run())
            await asyncio.sleep(0.05)
            assert not stub.registered
            gate.set()
            for _ in range(200):
                if stub.registered:
                    break
                await asyncio.sleep(0.01)
            assert stub.registered
            await _finish(stub, run)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_split_synchronize(sock_path: Path) -> None:
    """v0.8 ``more``: each intermediate part answered ``more=true`` without updates, the
    handler sees every pod and container once with the last part; the parts' handler times
    are summed under one budget (the WARNING is said once, at the last part)."""
    h = RecordingHandlers()
    h.sync_updates = [nri_pb2.ContainerUpdate(container_id="c0")]
    factory = Factory(h)

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            stub = _stub(sock_path, factory)
            serving = _serve(stub)
            conn = await _configured(rt)
            p1, c1 = _pods(2)
            p2, c2 = _pods(2, 2)
            first = await conn.call("Synchronize", nri_pb2.SynchronizeRequest(
                pods=p1, containers=c1, more=True), nri_pb2.SynchronizeResponse)
            assert first.more and not first.update
            assert not serving.done()
            last = await conn.call("Synchronize", nri_pb2.SynchronizeRequest(
                pods=p2, containers=c2), nri_pb2.SynchronizeResponse)
            assert not last.more and [u.container_id for u in last.update] == ["c0"]
            assert await serving == "synchronized"
            assert h.syncs == [(["p0", "p1", "p2", "p3"], ["c0", "c1", "c2", "c3"])]

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_split_synchronize_finished_by_the_loop(sock_path: Path) -> None:
    """The runtime pauses between two parts longer than the blocking wait: the event loop takes
    the second part and the handler still sees both parts' objects once."""
    h = RecordingHandlers()
    factory = Factory(h)

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            stub = _stub(sock_path, factory)
            serving = _serve(stub, wait=0.2)
            conn = await _configured(rt)
            p1, c1 = _pods(1)
            await conn.call("Synchronize", nri_pb2.SynchronizeRequest(
                pods=p1, containers=c1, more=True), nri_pb2.SynchronizeResponse)
            why = await serving
            assert why.startswith("no data from the runtime within 0.2 s"), why
            run = asyncio.ensure_future(stub.run())
            p2, c2 = _pods(1, 1)
            await conn.call("Synchronize", nri_pb2.SynchronizeRequest(
                pods=p2, containers=c2), nri_pb2.SynchronizeResponse)
            assert h.syncs == [(["p0", "p1"], ["c0", "c1"])]
            await _finish(stub, run)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_bytes_read_and_not_consumed_are_handed_over(sock_path: Path) -> None:
    """Synchronize and the first frame of a CreateContainer arrive in one write: the blocking
    side answers Synchronize and leaves the partial request (and what follows) to the event
    loop, which answers it once the rest comes."""
    factory = Factory()

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            stub = _stub(sock_path, factory)
            serving = _serve(stub)
            conn = await _configured(rt)
            sync = _expect(conn, 3)
            create = _expect(conn, 5)
            req = nri_pb2.CreateContainerRequest()
            req.container.id = "x" * 300
            create_msg = _request_bytes(5, "CreateContainer", req)[FRAME.size:]
            head, tail = create_msg[:100], create_msg[100:]
            conn.send_raw(_request_bytes(3, "Synchronize", nri_pb2.SynchronizeRequest())
                          + FRAME.pack(1, len(head)) + head)
            assert (await asyncio.wait_for(sync, 5)).status.code == 0
            assert await serving == "synchronized"
            assert stub._handover is not None and stub._handover.preface == \
                FRAME.pack(1, len(head)) + head
            run = asyncio.ensure_future(stub.run())
            await asyncio.sleep(0.05)
            assert not create.done()
            conn.send_raw(FRAME.pack(1, len(tail)) + tail)
            assert (await asyncio.wait_for(create, 5)).status.code == 0
            assert factory.handlers.calls == ["configure", "synchronize", "create_container"]
            await _finish(stub, run)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_an_unexpected_first_request_goes_to_the_loop(sock_path: Path) -> None:
    """A first request other than Configure or Synchronize (here Shutdown, then a
    CreateContainer) stops the blocking side before it consumes it: the event loop answers
    both, in order."""
    factory = Factory()

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            stub = _stub(sock_path, factory)
            serving = _serve(stub)
            conn = await rt.next_conn()
            await asyncio.wait_for(asyncio.shield(conn.registered), 5)
            shutdown = asyncio.ensure_future(conn.call_raw("Shutdown", b""))
            assert await serving == "a Shutdown request"
            assert stub._handover is not None and stub._handover.served == 0
            assert stub._handover.preface  # (the request, for the loop)
            assert factory.calls == 0
            run = asyncio.ensure_future(stub.run())
            assert (await shutdown).status.code == 0
            await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(),
                            nri_pb2.CreateContainerResponse)
            assert factory.handlers.calls == ["create_container"]
            await _finish(stub, run)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_eof_goes_to_the_loop(sock_path: Path) -> None:
    """The runtime closes the connection right after registering us: the blocking side
    stops at EOF and the event loop ends the session as it always did."""
    factory = Factory()

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            stub = _stub(sock_path, factory, reconnect=False)
            serving = _serve(stub)
            conn = await rt.next_conn()
            await asyncio.wait_for(asyncio.shield(conn.registered), 5)
            await conn.close()
            assert await serving == "EOF"
            await asyncio.wait_for(stub.run(), 5)
            assert stub.sessions == 1 and not stub.registered

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_refused_registration_goes_to_the_loop(sock_path: Path) -> None:
    """A refusal is not consumed: the event loop reads it, logs it and fails the session as
    without the blocking side."""
    factory = Factory()

    async def main() -> None:
        async with FakeRuntime(sock_path, register_error="no such plugin index") as rt:
            stub = _stub(sock_path, factory, reconnect=False)
            serving = _serve(stub)
            await rt.next_conn()
            assert await serving == "the registration was refused"
            await asyncio.wait_for(stub.run(), 5)
            assert stub.failed is not None and "no such plugin index" in stub.failed

    asyncio.run(asyncio.wait_for(main(), 30))


def test_a_silent_runtime_does_not_block_the_start(sock_path: Path) -> None:
    """A runtime that registers us and sends nothing: the blocking side gives up after its
    wait, and the event loop serves the session (Configure and Synchronize come later)."""
    factory = Factory()

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            stub = _stub(sock_path, factory)
            t0 = time.monotonic()
            serving = _serve(stub, wait=0.3)
            conn = await rt.next_conn()
            why = await serving
            assert why == "no data from the runtime within 0.3 s"
            assert 0.25 < time.monotonic() - t0 < 3
            assert stub._handover is not None and stub._handover.registered
            run = asyncio.ensure_future(stub.run())
            cfg = await conn.call("Configure", nri_pb2.ConfigureRequest(runtime_name="fake"),
                                  nri_pb2.ConfigureResponse)
            assert cfg.events == stub.events & 0x7FF
            await conn.call("Synchronize", nri_pb2.SynchronizeRequest(),
                            nri_pb2.SynchronizeResponse)
            assert factory.handlers.calls == ["configure", "synchronize"]
            await _finish(stub, run)

    asyncio.run(asyncio.wait_for(main(), 30))


class LoopUser(RecordingHandlers):
    """Handlers that schedule on "the running loop" as the plugin does: a call_soon, a
    call_later, a create_task and a cancelled timer in Synchronize, and work for after each
    answer (defer_after_reply)."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[tuple[str, bool]] = []  # (what, on the event loop's thread)
        self.main = threading.get_ident()

    def _mark(self, what: str) -> None:
        self.ran.append((what, threading.get_ident() == self.main))

    def defer_after_reply(self):  # noqa: ANN201
        return lambda: self._mark("after")

    def synchronize(self, pods, containers):
        loop = aio.get_running_loop()
        loop.call_soon(self._mark, "soon")
        loop.call_later(0.01, self._mark, "later")
        loop.call_later(0.01, self._mark, "cancelled").cancel()

        async def task() -> None:
            self._mark("task")

        loop.create_task(task())
        return super().synchronize(pods, containers)


def test_what_the_handlers_schedule_runs_once_the_loop_runs(sock_path: Path) -> None:
    """On the blocking side ``aio.get_running_loop()`` is a PreLoop: call_soon runs after the
    answer (there), timers and tasks wait for the event loop and run on it; a cancelled timer
    never runs; the after-reply work runs after each answer."""
    h = LoopUser()
    factory = Factory(h)

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            stub = _stub(sock_path, factory)
            serving = _serve(stub)
            conn = await rt.next_conn()
            await conn.handshake()
            assert await serving == "synchronized"
            assert h.ran == [("after", False), ("soon", False)]
            assert stub._handover is not None and stub._handover.pre.pending() == 2
            run = asyncio.ensure_future(stub.run())
            for _ in range(100):
                if len(h.ran) >= 4:
                    break
                await asyncio.sleep(0.01)
            assert sorted(h.ran[2:]) == [("later", True), ("task", True)]
            with pytest.raises(RuntimeError):
                _no_loop_in_thread()  # (another thread: no PreLoop there)
            await _finish(stub, run)

    asyncio.run(asyncio.wait_for(main(), 30))


def _no_loop_in_thread() -> None:
    """aio.get_running_loop() in a thread without a loop or a PreLoop: RuntimeError."""
    out: list[BaseException] = []

    def probe() -> None:
        try:
            aio.get_running_loop()
        except RuntimeError as e:
            out.append(e)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    raise out[0]


def test_serve_first_requests_needs_an_early_registration() -> None:
    stub = Stub(RecordingHandlers(), name="x", idx="10", socket_path="/nonexistent")
    with pytest.raises(ValueError, match="no early registration"):
        stub.serve_first_requests()


def test_the_plugin_synchronizes_before_loading_asyncio(tmp_path: Path) -> None:
    """What the plugin (the real command, its build and its managers) has imported when its
    Synchronize answer is written: not asyncio, nor what it loads (a subprocess against the
    fake runtime)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, sys\n"
        "import nri_cpumgr.transport.firstreqs as f\n"
        "orig = f._Session.handover\n"
        "def spy(self, why):\n"
        "    print('WHY', why, flush=True)\n"
        "    print('MODULES', ' '.join(sorted(sys.modules)), flush=True)\n"
        "    os._exit(0)\n"
        "f._Session.handover = spy\n"
        "from nri_cpumgr.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    (tmp_path / "c.yaml").write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    path = tempfile.mktemp(prefix="nri-f-", dir="/tmp")

    async def main() -> str:
        async with FakeRuntime(path) as rt:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(probe), "run", "--config", str(tmp_path / "c.yaml"),
                "--socket", path, "--state-dir", str(tmp_path / "s"),
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))
            conn = await rt.next_conn(timeout=30)
            pods, ctrs = _pods(5)
            await conn.handshake(pods=pods, containers=ctrs, timeout=30)
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
            return out.decode()

    out = asyncio.run(main())
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    assert lines["WHY"] == "synchronized"
    modules = lines["MODULES"].split()
    assert "nri_cpumgr.runtime.plugin" in modules and "nri_cpumgr.transport.stub" in modules
    for heavy in ("asyncio", "ssl", "concurrent.futures", "subprocess", "tenacity",
                  "nri_cpumgr.transport.mux", "nri_cpumgr.transport.ttrpc"):
        assert heavy not in modules, heavy


def test_sigterm_before_the_event_loop_stops_the_plugin(tmp_path: Path) -> None:
    """SIGTERM while the plugin waits on the blocking socket for its first request (no event
    loop, no loop signal handler yet): it stops as the loop's handler stops it (the same log
    line, exit status 0), within the blocking side's wait."""
    (tmp_path / "c.yaml").write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    path = tempfile.mktemp(prefix="nri-s-", dir="/tmp")

    async def main() -> tuple[int, str, float]:
        async with FakeRuntime(path) as rt:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "nri_cpumgr", "run", "--config", str(tmp_path / "c.yaml"),
                "--socket", path, "--state-dir", str(tmp_path / "s"),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                env=dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2])))
            conn = await rt.next_conn(timeout=30)
            await asyncio.wait_for(asyncio.shield(conn.registered), 30)
            await asyncio.sleep(0.3)  # (in the blocking wait for Configure)
            t0 = time.monotonic()
            proc.terminate()
            _, err = await asyncio.wait_for(proc.communicate(), 30)
            return proc.returncode, err.decode(), time.monotonic() - t0  # type: ignore[return-value]

    status, err, took = asyncio.run(main())
    assert status == 0, err
    assert "SIGTERM received: stopping" in err
    assert "it takes over: the plugin stopped" in err
    assert took < 10


def test_a_build_failing_after_configure_ends_run_with_its_error(sock_path: Path) -> None:
    """The deferred build fails right after Configure's answer on the blocking side: it stops
    there, and ``run`` raises the build's error (the command's exit status, as before)."""

    class Broken(Factory):
        def __call__(self) -> RecordingHandlers:
            self.calls += 1
            raise OSError("state directory not writable")

    factory = Broken()

    async def main() -> None:
        async with FakeRuntime(sock_path) as rt:
            stub = _stub(sock_path, factory)
            serving = _serve(stub)
            await _configured(rt)
            assert await serving == "the plugin stopped"
            assert factory.calls == 1
            with pytest.raises(OSError, match="not writable"):
                await asyncio.wait_for(stub.run(), 5)

    asyncio.run(asyncio.wait_for(main(), 30))


def test_running_loop_while_another_thread_imports_asyncio(monkeypatch: pytest.MonkeyPatch) -> None:
    """A partly imported ``asyncio.events`` (grpcio's import on the CRI worker thread while
    the plugin answers its first requests) is no running loop, not an AttributeError (seen on
    containerd 1.7, whose shared-pool mode is cri)."""
    import types

    monkeypatch.setitem(sys.modules, "asyncio.events", types.ModuleType("asyncio.events"))
    assert aio.running_loop() is None
    with aio.active(aio.PreLoop()) as pre:
        assert aio.get_running_loop() is pre
    with pytest.raises(RuntimeError):
        aio.get_running_loop()


def test_import_asyncio_leaves_ssl_out_for_this_import_only() -> None:
    """asyncio without ssl (a subprocess: this one has both), the finder gone afterwards, ssl
    importable later and by other threads meanwhile; grpcio's import (cri mode) after it
    loads no ssl either."""
    code = (
        "import sys, threading\n"
        "from nri_cpumgr import aio\n"
        "a = aio.import_asyncio()\n"
        "print('ssl' in sys.modules, a is sys.modules['asyncio'],\n"
        "      any(type(f).__name__ == '_NoSSL' for f in sys.meta_path))\n"
        "import grpc\n"
        "print('ssl' in sys.modules)\n"
        "t = threading.Thread(target=lambda: __import__('ssl')); t.start(); t.join()\n"
        "print('ssl' in sys.modules, sys.modules['ssl'] is not None)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).parents[2]).stdout.split("\n")
    assert out[0] == "False True False"
    assert out[1] == "False"
    assert out[2] == "True True"
