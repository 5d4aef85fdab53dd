"""The NRI plugin stub against the in-process fake runtime (tests/unit/nri_peer.py)."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.transport.stub import DEFAULT_EVENTS, PluginError, Stub, event_mask

from .nri_peer import FRAME, FakeRuntime, PeerCallError, PeerConn, RecordingHandlers

Scenario = Callable[[FakeRuntime, Stub, PeerConn, RecordingHandlers], Awaitable[None]]


def run_scenario(sock_path: Path, body: Scenario, *, handlers: RecordingHandlers | None = None,
                 runtime_kw: dict | None = None, **stub_kw: object) -> RecordingHandlers:
    """Start a fake runtime and a stub, hand the first connection to ``body``, clean up."""
    h = handlers or RecordingHandlers()

    async def main() -> None:
        rt = FakeRuntime(sock_path, **(runtime_kw or {}))
        await rt.start()
        kw: dict = {"backoff_initial": 0.01, "backoff_max": 0.05, **stub_kw}
        stub = Stub(h, name="test", idx="10", socket_path=str(sock_path), **kw)
        task = asyncio.create_task(stub.run())
        try:
            conn = await rt.next_conn()
            await body(rt, stub, conn, h)
        finally:
            stub.stop()
            await asyncio.wait_for(task, 5)
            await rt.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
    return h


async def until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)


def pod(i: int, big: int = 0) -> nri_pb2.PodSandbox:
    p = nri_pb2.PodSandbox(id=f"pod{i}", name=f"p{i}", uid=f"uid{i}", namespace="ns")
    p.linux.cgroup_parent = f"/kubepods/poduid{i}"
    if big:
        p.annotations["big"] = "x" * big
    return p


def ctr(i: int) -> nri_pb2.Container:
    c = nri_pb2.Container(id=f"ctr{i}", pod_sandbox_id=f"pod{i}", name=f"c{i}",
                          state=nri_pb2.CONTAINER_RUNNING)
    c.linux.resources.cpu.cpus = "0-1"
    return c


def test_register_configure_synchronize(sock_path: Path) -> None:
    async def body(rt, stub, conn, h):
        events, sync = await conn.handshake(config="a: 1", pods=[pod(1)], containers=[ctr(1)])
        reg = conn.registered.result()
        assert (reg.plugin_name, reg.plugin_idx) == ("test", "10")
        assert events == DEFAULT_EVENTS
        assert list(sync.update) == [] and not sync.more
        await until(lambda: stub.registered)
        assert h.configs[0].config == "a: 1"
        assert h.syncs == [(["pod1"], ["ctr1"])]
        assert (stub.runtime_name, stub.runtime_version) == ("fake", "0.0")

    h = run_scenario(sock_path, body)
    assert h.calls == ["configure", "synchronize", "disconnected"]


def test_default_events_are_the_cpu_manager_set() -> None:
    # REMOVE_POD_SANDBOX 3, CREATE 4, UPDATE 8, STOP 10, REMOVE_CONTAINER 11: bit 1 << (ev - 1)
    assert DEFAULT_EVENTS == (1 << 2) | (1 << 3) | (1 << 7) | (1 << 9) | (1 << 10)
    assert DEFAULT_EVENTS & (event_mask(5) | event_mask(7) | event_mask(9)) == 0  # no POST_*
    with pytest.raises(ValueError):
        event_mask(0)


@pytest.mark.parametrize(("requested", "answered"), [
    (0xFFFF, 0x7FF),
    ((1 << 11) | (1 << 12) | (1 << 13) | (1 << 3), 1 << 3),  # v0.10 events 12-14 dropped
    (0, 0),
])
def test_events_mask_capped_at_0x7ff(sock_path: Path, requested: int, answered: int) -> None:
    async def body(rt, stub, conn, h):
        events, _ = await conn.handshake()
        assert events == answered

    run_scenario(sock_path, body, events=requested)


def test_configure_before_register_reply(sock_path: Path) -> None:
    """The runtime may call Configure before answering RegisterPlugin (conn 1 must be served
    while the plugin waits on conn 2)."""
    seen: list[str] = []

    async def configure_first(conn: PeerConn, reg: nri_pb2.RegisterPluginRequest) -> None:
        resp = await conn.call("Configure", nri_pb2.ConfigureRequest(runtime_name="early"),
                               nri_pb2.ConfigureResponse, timeout=2.0)
        seen.append(f"configured events={resp.events}")

    async def body(rt, stub, conn, h):
        await asyncio.wait_for(asyncio.shield(conn.registered), 5)
        assert seen == [f"configured events={DEFAULT_EVENTS}"]
        await until(lambda: stub.registered)
        assert h.calls == ["configure"]
        assert stub.runtime_name == "early"

    run_scenario(sock_path, body, runtime_kw={"on_register": configure_first})


def test_split_synchronize(sock_path: Path) -> None:
    h0 = RecordingHandlers()
    upd = nri_pb2.ContainerUpdate(container_id="ctr1")
    upd.linux.resources.cpu.cpus = "1"
    h0.sync_updates = [upd]

    async def body(rt, stub, conn, h):
        await asyncio.wait_for(asyncio.shield(conn.registered), 5)
        await conn.call("Configure", nri_pb2.ConfigureRequest(), nri_pb2.ConfigureResponse)
        first = await conn.call("Synchronize", nri_pb2.SynchronizeRequest(
            pods=[pod(1), pod(2)], containers=[ctr(1)], more=True), nri_pb2.SynchronizeResponse)
        assert first.more is True and list(first.update) == []
        assert h.syncs == []
        last = await conn.call("Synchronize", nri_pb2.SynchronizeRequest(
            pods=[pod(3)], containers=[ctr(2), ctr(3)]), nri_pb2.SynchronizeResponse)
        assert last.more is False
        assert [(u.container_id, u.linux.resources.cpu.cpus) for u in last.update] == [
            ("ctr1", "1")]
        assert h.syncs == [(["pod1", "pod2", "pod3"], ["ctr1", "ctr2", "ctr3"])]

    h = run_scenario(sock_path, body, handlers=h0)
    assert h.calls.count("synchronize") == 1


def test_plugin_error_reaches_runtime_as_code_2(sock_path: Path) -> None:
    async def body(rt, stub, conn, h):
        await conn.handshake()
        req = nri_pb2.CreateContainerRequest(pod=pod(1), container=ctr(1))
        h.fail_with = PluginError("not enough free CPUs: want 4, have 1")
        with pytest.raises(PeerCallError) as err:
            await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert (err.value.code, err.value.message) == (2, "not enough free CPUs: want 4, have 1")
        h.fail_with = KeyError("boom")  # a bug also answers code 2, not a hang
        with pytest.raises(PeerCallError) as err:
            await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert err.value.code == 2 and "boom" in err.value.message
        h.fail_with = None
        h.create_response.adjust.linux.resources.cpu.cpus = "3"
        ok = await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert ok.adjust.linux.resources.cpu.cpus == "3"
        assert stub.registered  # errors do not drop the connection

    run_scenario(sock_path, body)


@pytest.mark.parametrize("method", [
    "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox", "PostCreateContainer",
    "StartContainer", "PostStartContainer", "PostUpdateContainer", "RemoveContainer",
    "UpdatePodSandbox", "PostUpdatePodSandbox", "ValidateContainerAdjustment", "NoSuchMethod",
])
def test_per_event_methods_unimplemented(sock_path: Path, method: str) -> None:
    async def body(rt, stub, conn, h):
        await conn.handshake()
        resp = await conn.call_raw(method, b"")
        assert resp.status.code == 12
        assert method in resp.status.message
        resp = await conn.call_raw("Configure", b"", service="other.Service")
        assert resp.status.code == 12 and "other.Service" in resp.status.message

    run_scenario(sock_path, body)


def test_other_plugin_methods(sock_path: Path) -> None:
    async def body(rt, stub, conn, h):
        await conn.handshake()
        ev = nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_CONTAINER, pod=pod(1),
                                      container=ctr(1))
        assert await conn.call("StateChange", ev, nri_pb2.Empty) == nri_pb2.Empty()
        await conn.call("UpdateContainer", nri_pb2.UpdateContainerRequest(container=ctr(1)),
                        nri_pb2.UpdateContainerResponse)
        await conn.call("StopContainer", nri_pb2.StopContainerRequest(container=ctr(1)),
                        nri_pb2.StopContainerResponse)
        assert await conn.call("Shutdown", nri_pb2.Empty(), nri_pb2.Empty) == nri_pb2.Empty()
        bad = await conn.call_raw("CreateContainer", b"\xff\xff\xff")
        assert bad.status.code == 3
        assert h.events == [nri_pb2.REMOVE_CONTAINER]
        assert h.calls[2:] == ["state_change", "update_container", "stop_container"]

    run_scenario(sock_path, body)


def test_stream_ids_even_or_reused_rejected(sock_path: Path) -> None:
    async def body(rt, stub, conn, h):
        await asyncio.wait_for(asyncio.shield(conn.registered), 5)
        cfg = nri_pb2.ConfigureRequest().SerializeToString()
        assert (await conn.call_raw("Configure", cfg, sid=2)).status.code == 3
        assert (await conn.call_raw("Configure", cfg, sid=5)).status.code == 0
        assert (await conn.call_raw("Configure", cfg, sid=5)).status.code == 3
        assert (await conn.call_raw("Configure", cfg, sid=3)).status.code == 3
        assert (await conn.call_raw("Configure", cfg, sid=7)).status.code == 0
        assert h.calls == ["configure", "configure"]

    run_scenario(sock_path, body)


def test_client_stream_ids_odd_increasing_per_connection(sock_path: Path) -> None:
    async def body(rt, stub, conn, h):
        await conn.handshake()
        for i in range(3):
            stub.request_update([nri_pb2.ContainerUpdate(container_id=f"c{i}")])
            await asyncio.wait_for(conn.updates.get(), 5)
        ids = [int(e[2]) for e in conn.log if e[0] == "request"]
        assert ids == [1, 3, 5, 7]  # RegisterPlugin, then three UpdateContainers
        await conn.close()
        conn2 = await rt.next_conn()
        await conn2.handshake()
        assert [int(e[2]) for e in conn2.log if e[0] == "request"] == [1]

    run_scenario(sock_path, body)


def test_update_deadline_follows_a_slow_runtime(sock_path: Path) -> None:
    """UpdateContainers sends its deadline as timeout_nano, and the runtime cancels the
    updates still under way when it passes (containerd 2.4.2 in a QEMU guest: 2 containers
    took 10.5 s, six calls in a row cancelled at 10 s). So the deadline doubles after each
    call without an answer, stays while answered calls are that slow, and comes back down
    to ``update_timeout`` once they are fast again."""
    async def body(rt, stub, conn, h):
        await conn.handshake()
        await until(lambda: stub.registered)
        conn.update_delays[:] = [0.5, 0.5, 0.5, 0.0, 0.0]
        payload = nri_pb2.UpdateContainersRequest(
            update=[nri_pb2.ContainerUpdate(container_id="c1")]).SerializeToString()
        for want in ("within 0", "within 0"):  # 0.2 s, then 0.4 s: both too short
            with pytest.raises(TimeoutError, match=want):
                await stub.update_containers(payload)
        assert stub.update_deadline == pytest.approx(0.8)
        for _ in range(3):  # answered in 0.5 s (kept at 0.8 s), then at once (back to 0.2)
            assert await stub.update_containers(payload) == set()
        assert conn.update_deadlines == pytest.approx([0.2, 0.4, 0.8, 0.8, 0.2])
        assert stub.update_deadline == pytest.approx(0.2)

    run_scenario(sock_path, body, update_timeout=0.2)


def test_update_deadline_growth_is_capped(sock_path: Path) -> None:
    """A runtime that never answers: the deadline stops at UPDATE_DEADLINE_GROWTH times
    update_timeout."""
    from nri_cpumgr.transport.stub import UPDATE_DEADLINE_GROWTH

    async def body(rt, stub, conn, h):
        await conn.handshake()
        await until(lambda: stub.registered)
        stub.update_deadline = 0.01 * UPDATE_DEADLINE_GROWTH / 2
        conn.update_delays[:] = [1.0, 1.0]
        for _ in range(2):
            with pytest.raises(TimeoutError):
                await stub.update_containers(b"")
        assert stub.update_deadline == pytest.approx(0.01 * UPDATE_DEADLINE_GROWTH)

    run_scenario(sock_path, body, update_timeout=0.01)


def test_request_update_sent_after_handler_reply(sock_path: Path) -> None:
    h0 = RecordingHandlers()
    during: list[int] = []

    async def body(rt, stub, conn, h):
        await conn.handshake()

        def in_handler() -> None:
            before = stub._mux.frames_out
            upd = nri_pb2.ContainerUpdate(container_id="other")
            upd.linux.resources.cpu.cpus = "0"
            stub.request_update([upd])
            during.append(stub._mux.frames_out - before)

        h.on_create = in_handler
        resp = await conn.call_raw("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=pod(1), container=ctr(1)).SerializeToString())
        assert resp.status.code == 0
        got = await asyncio.wait_for(conn.updates.get(), 5)
        assert [u.container_id for u in got.update] == ["other"]
        order = [e for e in conn.log if e[0] in ("response", "request") and e[1] != "1"]
        create_sid = next(e[2] for e in conn.log if e[:2] == ("call", "CreateContainer"))
        assert order.index(("response", create_sid)) < order.index(
            ("request", "UpdateContainers", "3"))
        # outside a handler the update goes out at once
        h.on_create = None
        stub.request_update([nri_pb2.ContainerUpdate(container_id="later")])
        got = await asyncio.wait_for(conn.updates.get(), 5)
        assert [u.container_id for u in got.update] == ["later"]

    run_scenario(sock_path, body, handlers=h0)
    assert during == [0]  # nothing was written while the handler ran


def test_reconnect_after_eof(sock_path: Path) -> None:
    async def body(rt, stub, conn, h):
        await conn.handshake(pods=[pod(1)])
        await until(lambda: stub.registered)
        await conn.close()  # runtime restart: EOF
        await until(lambda: h.disconnects == 1)
        conn2 = await rt.next_conn()
        await conn2.handshake(pods=[pod(2)])
        await until(lambda: stub.registered)
        assert stub.sessions == 2
        assert h.syncs == [(["pod1"], []), (["pod2"], [])]

    h = run_scenario(sock_path, body)
    assert h.calls == ["configure", "synchronize", "disconnected",
                       "configure", "synchronize", "disconnected"]


def test_reconnect_after_econnrefused(sock_path: Path) -> None:
    async def body(rt, stub, conn, h):
        await conn.handshake()
        await rt.stop()
        # what a stopped containerd leaves behind: a socket file nobody listens on
        stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stale.bind(str(sock_path))
        try:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with pytest.raises(ConnectionRefusedError):
                probe.connect(str(sock_path))
            probe.close()
            await until(lambda: h.disconnects == 1)
            await asyncio.sleep(0.3)  # several refused attempts with backoff
            assert not stub.registered and stub.sessions == 1
        finally:
            stale.close()
            os.unlink(sock_path)
        await rt.start()
        conn2 = await rt.next_conn()
        await conn2.handshake()
        await until(lambda: stub.registered)
        assert stub.sessions == 2

    run_scenario(sock_path, body)


def test_runtime_not_there_at_start(sock_path: Path) -> None:
    """The stub keeps retrying until the socket appears."""
    async def main() -> None:
        h = RecordingHandlers()
        stub = Stub(h, name="late", idx="05", socket_path=str(sock_path),
                    backoff_initial=0.01, backoff_max=0.05)
        task = asyncio.create_task(stub.run())
        await asyncio.sleep(0.2)
        assert stub.sessions == 0 and not task.done()
        async with FakeRuntime(sock_path) as rt:
            conn = await rt.next_conn()
            await conn.handshake()
            assert conn.registered.result().plugin_idx == "05"
            stub.stop()
            await asyncio.wait_for(task, 5)

    asyncio.run(asyncio.wait_for(main(), 20))


def test_registration_refused_plugin_closes(sock_path: Path) -> None:
    async def body(rt, stub, conn, h):
        await asyncio.wait_for(conn.closed, 5)  # the plugin closed the socket itself
        assert not stub.registered
        conn2 = await rt.next_conn()  # and tries again later
        await asyncio.wait_for(conn2.closed, 5)

    run_scenario(sock_path, body, runtime_kw={"register_error": "plugin index taken"})


def test_unknown_conn_frames_dropped(sock_path: Path) -> None:
    async def body(rt, stub, conn, h):
        await conn.handshake()
        conn.send_frames(7, b"\x00\x00\x00\x05junkjunkjunk")
        conn.send_frames(0, b"reserved")
        assert await conn.call("Shutdown", nri_pb2.Empty(), nri_pb2.Empty) == nri_pb2.Empty()
        assert stub.registered and stub.sessions == 1

    run_scenario(sock_path, body)


@pytest.mark.parametrize("header", [
    FRAME.pack(1, 0xFFFFFFF0),  # absurd mux frame length
    FRAME.pack(1, 10) + b"\xff\xff\xff\xf0" + b"\x00\x00\x00\x01\x01\x00",  # absurd ttrpc length
])
def test_garbage_header_closes_connection(sock_path: Path, header: bytes) -> None:
    async def body(rt, stub, conn, h):
        await conn.handshake()
        conn.send_raw(header)
        await asyncio.wait_for(conn.closed, 2)  # closed at once, not waiting for 4 GB
        await until(lambda: h.disconnects == 1)
        conn2 = await rt.next_conn()  # and reconnects
        await conn2.handshake()

    run_scenario(sock_path, body)


def test_large_synchronize_as_one_message(sock_path: Path) -> None:
    """containerd 1.7 sends a 5 MB Synchronize as one ttrpc message: 4096 + one large frame."""
    async def body(rt, stub, conn, h):
        await asyncio.wait_for(asyncio.shield(conn.registered), 5)
        pods = [pod(i, big=150_000) for i in range(40)]  # ~6 MB
        req = nri_pb2.SynchronizeRequest(pods=pods, containers=[ctr(i) for i in range(40)])
        assert req.ByteSize() > 6_000_000
        resp = await conn.call_raw("Synchronize", req.SerializeToString(), sizes=[4096])
        assert resp.status.code == 0
        assert h.syncs == [([f"pod{i}" for i in range(40)], [f"ctr{i}" for i in range(40)])]
        # and once more as a single 6 MB frame
        resp = await conn.call_raw("Synchronize", req.SerializeToString())
        assert resp.status.code == 0 and len(h.syncs) == 2

    run_scenario(sock_path, body)


def test_large_response_split_into_small_frames(sock_path: Path) -> None:
    h0 = RecordingHandlers()
    for i in range(100):
        h0.create_response.adjust.annotations[f"k{i}"] = "v" * 1000  # ~100 kB

    async def body(rt, stub, conn, h):
        await conn.handshake()
        before = len(conn.frames)
        resp = await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=pod(1), container=ctr(1)), nri_pb2.CreateContainerResponse)
        assert resp == h.create_response
        frames = conn.frames[before:]
        assert len(frames) >= 100_000 // 4096 + 1
        assert all(c == 1 for c, _ in frames)
        assert max(n for _, n in conn.frames) <= 4096

    run_scenario(sock_path, body, handlers=h0)


def test_launched_mode_over_socketpair(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        monkeypatch.setenv("NRI_PLUGIN_SOCKET", str(ours.detach()))
        monkeypatch.setenv("NRI_PLUGIN_NAME", "cpumgr")
        monkeypatch.setenv("NRI_PLUGIN_IDX", "90")
        h = RecordingHandlers()
        stub = Stub.from_env(h)
        assert stub.socket_path is None
        task = asyncio.create_task(stub.run())
        conn = await PeerConn.from_socket(theirs)
        events, _ = await conn.handshake(config="from conf.d")
        reg = conn.registered.result()
        assert (reg.plugin_name, reg.plugin_idx, events) == ("cpumgr", "90", DEFAULT_EVENTS)
        await conn.close()
        await asyncio.wait_for(task, 5)  # launched mode does not reconnect
        assert h.calls == ["configure", "synchronize", "disconnected"]
        assert h.configs[0].config == "from conf.d"

    asyncio.run(asyncio.wait_for(main(), 20))


def test_from_env_requires_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NRI_PLUGIN_SOCKET", raising=False)
    with pytest.raises(RuntimeError):
        Stub.from_env(RecordingHandlers())
    with pytest.raises(ValueError):
        Stub(RecordingHandlers(), name="x", idx="1")


def test_runtime_dropping_plugin_after_register_is_not_hammered(sock_path: Path) -> None:
    """A connection lost right after registration keeps backing off (no reconnect storm)."""
    async def body(rt, stub, conn, h):
        start = asyncio.get_running_loop().time()
        count = 0
        while asyncio.get_running_loop().time() - start < 0.6:
            await asyncio.wait_for(asyncio.shield(conn.registered), 5)
            await conn.close()
            count += 1
            try:
                conn = await rt.next_conn(timeout=0.7)
            except TimeoutError:
                break
        # backoff 0.05, 0.1, 0.2, 0.4 s: about 4 connections in 0.6 s, not hundreds
        assert 2 <= count <= 6, count

    run_scenario(sock_path, body, backoff_initial=0.05, backoff_max=1.0)


class _DeferringHandlers(RecordingHandlers):
    """Handlers that leave work for after their answer (Plugin.defer_after_reply)."""

    def __init__(self) -> None:
        super().__init__()
        self.stub: Stub | None = None
        self.seen: list[tuple[str, int]] = []  # (what, mux frames written by then)

    def defer_after_reply(self):
        def after() -> None:
            assert self.stub is not None
            self.seen.append(("after", self.stub._mux.frames_out))
        return after

    def create_container(self, req):
        assert self.stub is not None
        self.seen.append(("create", self.stub._mux.frames_out))
        return super().create_container(req)

    def stop_container(self, req):
        assert self.stub is not None
        self.seen.append(("stop", self.stub._mux.frames_out))
        return super().stop_container(req)


def test_after_reply_work_runs_once_the_answer_is_written(sock_path: Path) -> None:
    """Work a handler leaves for after its answer runs once that answer's frame is written
    and before the next request is handled (the two requests sent back to back)."""
    h = _DeferringHandlers()

    async def body(rt, stub, conn, hh):
        h.stub = stub
        await conn.handshake()
        h.seen.clear()
        create = conn.call_raw("CreateContainer", nri_pb2.CreateContainerRequest(
            pod=pod(1), container=ctr(1)).SerializeToString())
        stop = conn.call_raw("StopContainer", nri_pb2.StopContainerRequest(
            pod=pod(1), container=ctr(1)).SerializeToString())
        r1, r2 = await asyncio.gather(create, stop)
        assert r1.status.code == 0 and r2.status.code == 0

    run_scenario(sock_path, body, handlers=h)
    what = [w for w, _ in h.seen]
    assert what[:4] == ["create", "after", "stop", "after"], h.seen
    (_, c), (_, a1), (_, s), (_, a2) = h.seen[:4]
    assert a1 == c + 1 and s == a1 and a2 == s + 1  # each answer written before its work
