"""sharedPoolUpdateMode cri (issue 31): shared-pool passes as CRI UpdateContainerResources
calls, from a worker thread, against a real gRPC server on a unix socket (grpcio).

The server stands in for the runtime: like containerd and CRI-O it shows each call to the
plugin before answering (here: it waits for a callback on the plugin's event loop, as the
runtime waits for the plugin's answer to the NRI UpdateContainer), so a pass that blocked the
event loop would hang these tests instead of passing."""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import socket
import threading
import time
from pathlib import Path

import grpc
import pytest

from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.poolsync import SharedPoolSync
from nri_cpumgr.poolsync.activity import NodeActivity
from nri_cpumgr.poolsync.cri import CRIUpdater, probe


def _expected(cid: str, cpus: str, mems: str = "") -> bytes:
    """UpdateContainerResourcesRequest bytes written by hand from k8s.io/cri-api
    runtime/v1/api.proto: container_id = 1, linux = 2 {cpuset_cpus = 6, cpuset_mems = 7}:
    nothing else, so no share, quota or memory limit of the container is touched."""
    def ld(tag: int, b: bytes) -> bytes:
        assert len(b) < 128
        return bytes([tag, len(b)]) + b

    inner = ld(0x32, cpus.encode()) + (ld(0x3A, mems.encode()) if mems else b"")
    return ld(0x0A, cid.encode()) + ld(0x12, inner)


class FakeRuntime:
    """A CRI RuntimeService with UpdateContainerResources only; ``answers``: container id ->
    (grpc.StatusCode, message) to fail with; ``on_call``: run for each call before it is
    answered (the runtime's NRI UpdateContainer to the plugin)."""

    def __init__(self, path: Path) -> None:
        self.calls: list[bytes] = []
        self.answers: dict[str, tuple[grpc.StatusCode, str]] = {}
        self.on_call = None
        self.block = threading.Event()
        handler = grpc.unary_unary_rpc_method_handler(
            self._update, request_deserializer=lambda b: b,
            response_serializer=lambda r: b"")
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "runtime.v1.RuntimeService", {"UpdateContainerResources": handler})])
        self.server.add_insecure_port(f"unix://{path}")
        self.server.start()

    def _update(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        self.calls.append(raw)
        if self.on_call is not None:
            self.on_call(raw)
        from nri_cpumgr.api import cri_pb2

        cid = cri_pb2.UpdateContainerResourcesRequest.FromString(raw).container_id
        if cid in self.answers:
            code, msg = self.answers[cid]
            context.abort(code, msg)
        return b""

    def stop(self) -> None:
        self.server.stop(0)


@pytest.fixture
def runtime(tmp_path):
    path = tmp_path / "cri.sock"
    rt = FakeRuntime(path)
    rt.path = path
    yield rt
    rt.stop()


def test_probe(tmp_path, runtime):
    assert probe(str(runtime.path)) is None
    assert probe(str(tmp_path / "none.sock")) == (
        f"{tmp_path / 'none.sock'} does not exist (not mounted into the plugin's container?)")
    (tmp_path / "file").write_text("")
    assert probe(str(tmp_path / "file")) == f"{tmp_path / 'file'} is not a socket"
    stale = tmp_path / "stale.sock"  # a socket no runtime listens on (a crashed one's)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    assert probe(str(stale)) == f"cannot connect to {stale}: Connection refused"


def test_requests_carry_the_cpuset_only(runtime):
    cri = CRIUpdater(str(runtime.path))
    try:
        out = cri.update_all("0-1,4", [("a", ""), ("b", "0")])
    finally:
        cri.close()
    assert (out.failed, out.gone, out.unanswered) == ({}, set(), set())
    # (two calls in flight: in either order)
    assert sorted(runtime.calls) == sorted([_expected("a", "0-1,4"),
                                            _expected("b", "0-1,4", "0")])


def test_gone_failed_and_unanswered(runtime):
    runtime.answers = {
        "gone": (grpc.StatusCode.NOT_FOUND, "an error occurred when try to find container"),
        "removing": (grpc.StatusCode.UNKNOWN, "container \"removing\" is in removing state"),
        "bad": (grpc.StatusCode.INVALID_ARGUMENT, "invalid cpuset"),
        "stopped": (grpc.StatusCode.UNKNOWN, "failed to update resources: failed to update "
                    "resources: cannot update a stopped container"),
        "exited": (grpc.StatusCode.UNKNOWN, "failed to update resources: runc did not "
                   "terminate successfully: exit status 1: container not running"),
    }
    cri = CRIUpdater(str(runtime.path), timeout=0.5)
    try:
        out = cri.update_all("1", [("gone", ""), ("ok", ""), ("removing", ""), ("bad", ""),
                                   ("stopped", ""), ("exited", "")])
        assert out.gone == {"gone", "removing", "stopped", "exited"}
        assert out.unanswered == set()
        assert out.failed == {"bad": "INVALID_ARGUMENT: invalid cpuset"}
        # no answer in time: that one and the rest of the batch are unanswered
        runtime.on_call = lambda raw: runtime.block.wait(2)
        out = cri.update_all("1", [("slow", ""), ("after", "")])
        assert out.unanswered == {"slow", "after"} and out.error.startswith("DEADLINE_EXCEEDED")
        runtime.block.set()
        runtime.on_call = None
        runtime.stop()  # the socket goes away: unanswered, never "gone"
        out = cri.update_all("1", [("x", "")])
        assert out.unanswered == {"x"} and not out.gone and not out.failed
    finally:
        cri.close()


def test_a_pass_runs_on_the_worker_while_the_loop_answers(runtime):
    """The whole cri path: SharedPoolSync plans, the worker calls, the runtime waits for the
    plugin's event loop at every call (the NRI UpdateContainer), gone containers leave the
    plan, a refused one stays stale, the others are on the new pool."""
    runtime.answers = {"c3": (grpc.StatusCode.NOT_FOUND, "not found"),
                       "c4": (grpc.StatusCode.FAILED_PRECONDITION, "cgroup busy")}
    answered: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def nri_update_container(raw: bytes) -> None:
            answered.append(threading.current_thread().name)

        def on_call(raw: bytes) -> None:  # a gRPC server thread: the runtime
            asyncio.run_coroutine_threadsafe(nri_update_container(raw), loop).result(2)

        runtime.on_call = on_call
        cri = CRIUpdater(str(runtime.path))
        sync = SharedPoolSync(shrink_delay=0.05, grow_delay=0.05, quiet=0.01, batch_size=2,
                              mode="cri")
        old = CPUSet.parse("0-3")
        sync.connected(cri.send, old,
                       {f"c{i}": (old, "0" if i == 2 else "") for i in range(1, 6)})
        sync.set_target(CPUSet.parse("0-1"))
        for _ in range(200):
            await asyncio.sleep(0.02)
            if len(runtime.calls) >= 5 and not sync._busy():
                break
        cri.close()
        p = sync.planner
        assert "c3" not in p.shared  # gone: not an error, out of the plan
        assert p.shared["c4"].failures == 1 and p.shared["c4"].applied == old
        for c in ("c1", "c2", "c5"):
            assert p.shared[c].applied == CPUSet.parse("0-1"), c
        sync.close()

    asyncio.run(asyncio.wait_for(main(), 20))
    assert len(runtime.calls) == 5
    assert _expected("c2", "0-1", "0") in runtime.calls
    assert answered == ["MainThread"] * 5  # each call was answered on the plugin's loop


def test_not_found_before_the_start_is_retried(runtime):
    """A container created but not in the runtime's store yet answers NotFound: it stays in
    the plan (a failure), it is not dropped as gone."""
    runtime.answers = {"new": (grpc.StatusCode.NOT_FOUND, "not found")}

    async def main() -> None:
        cri = CRIUpdater(str(runtime.path))
        sync = SharedPoolSync(shrink_delay=0.05, grow_delay=0.05, quiet=0.01, mode="cri")
        sync.connected(cri.send, CPUSet.parse("0-3"), {})
        sync.add("new", CPUSet.parse("0-3"), created=True)
        sync.set_target(CPUSet.parse("0-1"))
        for _ in range(100):
            await asyncio.sleep(0.02)
            if runtime.calls and not sync._busy():
                break
        cri.close()
        assert sync.planner.shared["new"].failures == 1
        sync.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_not_yet_created_on_crio_is_sent_again_at_the_start(runtime):
    """CRI-O answers "specified container <id> is not yet created" while its CreateContainer
    is under way: not a failure (never dropped), sent again once the container started."""
    runtime.answers = {"new": (grpc.StatusCode.UNKNOWN,
                               "specified container new is not yet created")}

    async def main() -> None:
        cri = CRIUpdater(str(runtime.path))
        sync = SharedPoolSync(shrink_delay=0.05, grow_delay=0.05, quiet=0.01, mode="cri")
        sync.planner.max_failures = 1  # one counted failure would drop it
        sync.connected(cri.send, CPUSet.parse("0-3"), {})
        sync.add("new", CPUSet.parse("0-3"), created=True)
        sync.set_target(CPUSet.parse("0-1"))

        async def settle(n: int) -> None:
            for _ in range(200):
                await asyncio.sleep(0.02)
                if len(runtime.calls) >= n and not sync._busy():
                    return

        await settle(1)
        assert len(runtime.calls) == 1
        assert "new" in sync.planner.shared  # not dropped, even with max_failures 1
        assert sync.planner.shared["new"].failures == 0
        runtime.answers = {}
        sync.started("new")  # PostStartContainer: the update is sent again
        await settle(2)
        cri.close()
        assert runtime.calls[1] == _expected("new", "0-1")
        sync.close()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_the_batch_under_way_is_journaled(runtime, tmp_path):
    """While a batch's calls run its ids are on disk (a plugin killed then leaves them for
    the next instance to send again, take_in_flight); after its last call they are not."""
    from nri_cpumgr.poolsync.cri import take_in_flight

    journal = tmp_path / "in-flight"
    seen: list[str] = []
    runtime.on_call = lambda raw: seen.append(journal.read_text())
    cri = CRIUpdater(str(runtime.path), journal=journal)
    try:
        cri.update_all("0", [("a", ""), ("b", "")])
    finally:
        cri.close()
    assert seen == ["a\nb\n", "a\nb\n"]
    assert not journal.exists() and take_in_flight(journal) == set()
    journal.write_text("a\nb\n")  # what a SIGKILL in the middle leaves
    assert take_in_flight(journal) == {"a", "b"} and not journal.exists()


def test_calls_in_flight_at_once_are_bounded(runtime):
    """``parallel`` calls of one batch are in the runtime at the same time, never more; with
    1, one after the other. A call without an answer stops the batch: what had not started
    is unanswered, what the other call got stays."""
    lock = threading.Lock()
    now = [0]
    peak = [0]

    def on_call(raw: bytes) -> None:
        with lock:
            now[0] += 1
            peak[0] = max(peak[0], now[0])
        threading.Event().wait(0.05)  # the runtime's work on the call
        with lock:
            now[0] -= 1

    runtime.on_call = on_call
    items = [(f"c{i}", "") for i in range(8)]
    for parallel, want in ((1, 1), (2, 2), (3, 3)):
        peak[0] = 0
        runtime.calls.clear()
        cri = CRIUpdater(str(runtime.path), parallel=parallel)
        try:
            out = cri.update_all("1", items)
        finally:
            cri.close()
        assert (out.failed, out.gone, out.unanswered) == ({}, set(), set())
        assert len(runtime.calls) == 8 and cri.calls == 8
        assert peak[0] == want, parallel
    with pytest.raises(ValueError):
        CRIUpdater(str(runtime.path), parallel=0)

    # c0 never answers (deadline), c1 does: c2.. never start
    def slow(raw: bytes) -> None:
        from nri_cpumgr.api import cri_pb2

        if cri_pb2.UpdateContainerResourcesRequest.FromString(raw).container_id == "c0":
            runtime.block.wait(2)
        else:
            threading.Event().wait(0.05)

    runtime.on_call = slow
    runtime.calls.clear()
    cri = CRIUpdater(str(runtime.path), timeout=0.5, parallel=2)
    try:
        out = cri.update_all("1", items)
    finally:
        runtime.block.set()
        cri.close()
    assert "c0" in out.unanswered and out.error.startswith("DEADLINE_EXCEEDED")
    started = {cri_pb2_id(raw) for raw in runtime.calls}
    assert out.unanswered == {"c0"} | {c for c, _ in items if c not in started}
    assert started - {"c0"}, "the other call went on while c0 waited"
    assert not (started - {"c0"}) & out.unanswered


def cri_pb2_id(raw: bytes) -> str:
    from nri_cpumgr.api import cri_pb2

    return cri_pb2.UpdateContainerResourcesRequest.FromString(raw).container_id


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(round(s, 6))
        self.t += s


def test_node_activity_holds_until_quiet_and_no_longer_than_its_bound():
    clock = FakeClock()
    act = NodeActivity(quiet=0.03, max_hold=0.1, clock=clock, sleep=clock.sleep)
    assert act.hold() == 0.0 and clock.slept == []  # nothing happened yet
    act.touch()
    clock.t += 0.01
    assert act.hold() == pytest.approx(0.02)  # held until 30 ms after the operation
    assert act.hold() == 0.0  # quiet now
    clock.t += 1
    act.touch()
    assert act.hold() == pytest.approx(0.03)
    assert (act.held_calls, act.held) == (2, pytest.approx(0.05))

    # an operation every 20 ms without end: each call waits its bound, then goes
    def sleep(s: float) -> None:
        clock.sleep(s)
        act.last = clock.t - 0.001  # another pod operation meanwhile

    act = NodeActivity(quiet=0.03, max_hold=0.1, clock=clock, sleep=sleep)
    act.touch()
    assert act.hold() == pytest.approx(0.1)
    assert act.hold() == pytest.approx(0.1)
    off = NodeActivity(max_hold=0, clock=clock, sleep=sleep)  # turned off
    off.touch()
    assert off.hold() == 0.0


def test_a_call_waits_for_the_pod_operation_of_the_moment(runtime):
    """The worker holds each call while pod operations go on (the plugin touches the
    activity when it answers one), bounded: under a storm of operations the batch still
    ends, each call at most ``max_hold`` late."""
    at: list[float] = []
    runtime.on_call = lambda raw: at.append(time.monotonic())
    act = NodeActivity(quiet=0.3, max_hold=2.0)
    cri = CRIUpdater(str(runtime.path), activity=act, parallel=1)
    try:
        cri.update_all("1", [("warm", "")])  # (the channel opened)
        at.clear()
        act.touch()
        t0 = time.monotonic()
        out = cri.update_all("1", [("a", "")])
        assert not out.unanswered and len(at) == 1
        assert at[0] - t0 >= 0.29  # after the quiet period
        # a storm: an operation every 10 ms for 1.5 s; calls held at most 0.1 s each
        act.quiet, act.max_hold = 0.05, 0.1
        stop = threading.Event()

        def storm() -> None:
            while not stop.is_set():
                act.touch()
                stop.wait(0.01)

        th = threading.Thread(target=storm)
        th.start()
        at.clear()
        t0 = time.monotonic()
        try:
            out = cri.update_all("1", [(f"s{i}", "") for i in range(5)])
        finally:
            stop.set()
            th.join()
        took = time.monotonic() - t0
        assert len(at) == 5 and not out.unanswered
        assert 0.45 <= took < 2.5  # each call held ~0.1 s: never starved, never skipped
    finally:
        cri.close()


def test_the_pass_says_how_long_it_yielded(runtime, caplog):
    """The pass's log line says how long its calls waited for pod operations (none: not
    said)."""
    import logging

    async def main(touch: bool) -> None:
        act = NodeActivity(quiet=0.2, max_hold=1.0)
        cri = CRIUpdater(str(runtime.path), activity=act, parallel=1)
        sync = SharedPoolSync(shrink_delay=0.05, grow_delay=0.05, quiet=0.01, mode="cri")
        old = CPUSet.parse("0-3")
        sync.connected(cri.send, old, {"a": (old, ""), "b": (old, "")})
        if touch:
            act.touch()  # a pod operation was just answered
        sync.set_target(CPUSet.parse("0-1"))
        for _ in range(200):
            await asyncio.sleep(0.02)
            if "containers moved" in caplog.text:
                break
        cri.close()
        sync.close()

    with caplog.at_level(logging.INFO, logger="nri_cpumgr.poolsync"):
        asyncio.run(asyncio.wait_for(main(False), 20))
        assert "2 containers moved to 0-1 in 2 CRI UpdateContainerResources calls (" \
            in caplog.text and "yielding" not in caplog.text
        caplog.clear()
        asyncio.run(asyncio.wait_for(main(True), 20))
    got = re.search(r"2 CRI UpdateContainerResources calls \(\d+ ms, (\d+) ms of it "
                    r"yielding to pod operations\)", caplog.text)
    assert got and 100 <= int(got.group(1)) <= 1000, caplog.text
