"""An in-process fake NRI runtime for transport tests.

It is written independently of nri_cpumgr.transport (raw asyncio streams, its own frame and
ttrpc parsing) so that the tests check our code against a second implementation, and so that
tests can misbehave on purpose: choose frame sizes and stream ids, send garbage, delay the
RegisterPlugin reply. Every frame the plugin writes is recorded (``frames``) and every event
is appended to ``log`` in arrival order.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

from google.protobuf.message import Message

from nri_cpumgr.api import nri_pb2, ttrpc_pb2

FRAME = struct.Struct(">II")
MSG = struct.Struct(">IIBB")
PLUGIN = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME = "nri.pkg.api.v1alpha1.Runtime"


class PeerCallError(Exception):
    """The plugin answered with a non-OK status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"code {code}: {message}")
        self.code = code
        self.message = message


RegisterHook = Callable[["PeerConn", nri_pb2.RegisterPluginRequest], Awaitable[None]]


class PeerConn:
    """The runtime's end of one plugin connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 on_register: RegisterHook | None = None,
                 register_error: str | None = None) -> None:
        self.reader = reader
        self.writer = writer
        self.on_register = on_register
        self.register_error = register_error
        self.frames: list[tuple[int, int]] = []  # (conn id, frame length incl. header)
        self.log: list[tuple[str, ...]] = []
        self.registered: asyncio.Future[nri_pb2.RegisterPluginRequest] = (
            asyncio.get_running_loop().create_future())
        self.updates: asyncio.Queue[nri_pb2.UpdateContainersRequest] = asyncio.Queue()
        #: container ids whose UpdateContainers the runtime reports as failed
        self.fail_updates: set[str] = set()
        # UpdateContainers: seconds to wait before answering each call (popped; none left:
        # at once), and each call's deadline as sent (timeout_nano, in seconds)
        self.update_delays: list[float] = []
        self.update_deadlines: list[float] = []
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._bufs: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        self._pending: dict[int, asyncio.Future[ttrpc_pb2.Response]] = {}
        self._next_sid = 1
        self._tasks: set[asyncio.Task[None]] = set()
        self._reader_task = asyncio.ensure_future(self._read_loop())

    # --- raw I/O -----------------------------------------------------------------------------
    def send_frames(self, conn_id: int, data: bytes, sizes: list[int] | None = None) -> None:
        """Write ``data`` to ``conn_id`` as frames of the given payload sizes (the remainder
        in one last frame); one frame if ``sizes`` is None."""
        out = bytearray()
        pos = 0
        for size in sizes or []:
            out += FRAME.pack(conn_id, size) + data[pos:pos + size]
            pos += size
        if pos < len(data) or not sizes:
            out += FRAME.pack(conn_id, len(data) - pos) + data[pos:]
        self.writer.write(bytes(out))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def _read_loop(self) -> None:
        try:
            while True:
                hdr = await self.reader.readexactly(FRAME.size)
                conn_id, length = FRAME.unpack(hdr)
                payload = await self.reader.readexactly(length)
                self.frames.append((conn_id, FRAME.size + length))
                buf = self._bufs.get(conn_id)
                if buf is None:
                    continue
                buf += payload
                while len(buf) >= MSG.size:
                    mlen, sid, mtype, _flags = MSG.unpack_from(buf)
                    if len(buf) < MSG.size + mlen:
                        break
                    data = bytes(buf[MSG.size:MSG.size + mlen])
                    del buf[:MSG.size + mlen]
                    self._message(conn_id, sid, mtype, data)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.log.append(("eof",))
            if not self.closed.done():
                self.closed.set_result(None)
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("plugin connection closed"))

    def _message(self, conn_id: int, sid: int, mtype: int, data: bytes) -> None:
        if conn_id == 1 and mtype == 2:
            self.log.append(("response", str(sid)))
            fut = self._pending.pop(sid, None)
            if fut is not None and not fut.done():
                fut.set_result(ttrpc_pb2.Response.FromString(data))
        elif conn_id == 2 and mtype == 1:
            req = ttrpc_pb2.Request.FromString(data)
            self.log.append(("request", req.method, str(sid)))
            task = asyncio.ensure_future(self._serve(sid, req))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self.log.append(("unexpected", str(conn_id), str(mtype)))

    def _reply(self, sid: int, payload: bytes = b"", code: int = 0, message: str = "") -> None:
        resp = ttrpc_pb2.Response(status=ttrpc_pb2.Status(code=code, message=message),
                                  payload=payload)
        data = resp.SerializeToString()
        self.send_frames(2, MSG.pack(len(data), sid, 2, 0) + data)

    async def _serve(self, sid: int, req: ttrpc_pb2.Request) -> None:
        if req.service != RUNTIME:
            self._reply(sid, code=12, message="unknown service")
        elif req.method == "RegisterPlugin":
            reg = nri_pb2.RegisterPluginRequest.FromString(req.payload)
            if self.on_register is not None:
                await self.on_register(self, reg)
            if self.register_error:
                self._reply(sid, code=2, message=self.register_error)
            else:
                self._reply(sid, nri_pb2.Empty().SerializeToString())
            if not self.registered.done():
                self.registered.set_result(reg)
        elif req.method == "UpdateContainers":
            upd = nri_pb2.UpdateContainersRequest.FromString(req.payload)
            self.update_deadlines.append(req.timeout_nano / 1e9)
            if self.update_delays:
                await asyncio.sleep(self.update_delays.pop(0))
            await self.updates.put(upd)
            resp = nri_pb2.UpdateContainersResponse(failed=[
                nri_pb2.ContainerUpdate(container_id=u.container_id) for u in upd.update
                if u.container_id in self.fail_updates])
            self._reply(sid, resp.SerializeToString())
        else:
            self._reply(sid, code=12, message="unknown method")

    # --- calling the plugin ------------------------------------------------------------------
    async def call_raw(self, method: str, payload: bytes, *, sid: int | None = None,
                       service: str = PLUGIN, sizes: list[int] | None = None,
                       timeout: float = 5.0) -> ttrpc_pb2.Response:
        """Send one request on conn 1 (stream id ``sid`` or the next odd one); return the
        response envelope."""
        if sid is None:
            sid = self._next_sid
            self._next_sid += 2
        data = ttrpc_pb2.Request(service=service, method=method, payload=payload,
                                 timeout_nano=int(timeout * 1e9)).SerializeToString()
        fut: asyncio.Future[ttrpc_pb2.Response] = asyncio.get_running_loop().create_future()
        self._pending[sid] = fut
        self.log.append(("call", method, str(sid)))
        self.send_frames(1, MSG.pack(len(data), sid, 1, 0) + data, sizes)
        return await asyncio.wait_for(fut, timeout)

    async def call(self, method: str, req: Message, resp_cls: type[Message], **kw: object):
        """Call a Plugin method; return the decoded response or raise PeerCallError."""
        resp = await self.call_raw(method, req.SerializeToString(), **kw)  # type: ignore[arg-type]
        if resp.status.code:
            raise PeerCallError(resp.status.code, resp.status.message)
        return resp_cls.FromString(resp.payload)

    async def handshake(self, *, config: str = "", pods: list[nri_pb2.PodSandbox] | None = None,
                        containers: list[nri_pb2.Container] | None = None,
                        timeout: float = 5.0) -> tuple[int, nri_pb2.SynchronizeResponse]:
        """What the runtime does for a new plugin: wait for RegisterPlugin, Configure,
        Synchronize. Returns (events mask, Synchronize response)."""
        await asyncio.wait_for(asyncio.shield(self.registered), timeout)
        cfg = await self.call("Configure", nri_pb2.ConfigureRequest(
            config=config, runtime_name="fake", runtime_version="0.0"), nri_pb2.ConfigureResponse)
        sync = await self.call("Synchronize", nri_pb2.SynchronizeRequest(
            pods=pods or [], containers=containers or []), nri_pb2.SynchronizeResponse)
        return cfg.events, sync

    async def close(self) -> None:
        """Close the socket from the runtime's side (what a runtime restart looks like)."""
        with contextlib.suppress(Exception):
            self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self._reader_task, 2)
        for task in list(self._tasks):
            task.cancel()

    @classmethod
    async def from_socket(cls, sock: socket.socket, **kw: object) -> PeerConn:
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer, **kw)  # type: ignore[arg-type]


class FakeRuntime:
    """Listens on a unix socket like containerd's NRI socket; one PeerConn per plugin."""

    def __init__(self, path: Path | str, **conn_kw: object) -> None:
        self.path = str(path)
        self.conn_kw = conn_kw
        self.conns: asyncio.Queue[PeerConn] = asyncio.Queue()
        self.all: list[PeerConn] = []
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = PeerConn(reader, writer, **self.conn_kw)  # type: ignore[arg-type]
            self.all.append(conn)
            await self.conns.put(conn)

        self._server = await asyncio.start_unix_server(accept, path=self.path)

    async def next_conn(self, timeout: float = 5.0) -> PeerConn:
        return await asyncio.wait_for(self.conns.get(), timeout)

    async def stop(self) -> None:
        """Stop listening (socket file removed) and close every connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
            with contextlib.suppress(FileNotFoundError):
                Path(self.path).unlink()
        for conn in self.all:
            await conn.close()

    async def __aenter__(self) -> FakeRuntime:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class RecordingHandlers:
    """Handlers for nri_cpumgr.transport.stub.Stub that record every call.

    ``create_response`` is returned by create_container; ``fail_with`` (an exception) is
    raised by create_container; ``on_create`` runs inside create_container.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.configs: list[nri_pb2.ConfigureRequest] = []
        self.syncs: list[tuple[list[str], list[str]]] = []
        self.sync_updates: list[nri_pb2.ContainerUpdate] = []
        self.create_response = nri_pb2.CreateContainerResponse()
        self.fail_with: Exception | None = None
        self.on_create: Callable[[], None] | None = None
        self.events: list[int] = []
        self.disconnects = 0

    def configure(self, req: nri_pb2.ConfigureRequest) -> None:
        self.calls.append("configure")
        self.configs.append(req)

    def synchronize(self, pods, containers):
        self.calls.append("synchronize")
        self.syncs.append(([p.id for p in pods], [c.id for c in containers]))
        return list(self.sync_updates)

    def create_container(self, req):
        self.calls.append("create_container")
        if self.on_create is not None:
            self.on_create()
        if self.fail_with is not None:
            raise self.fail_with
        return self.create_response

    def update_container(self, req):
        self.calls.append("update_container")
        return nri_pb2.UpdateContainerResponse()

    def stop_container(self, req):
        self.calls.append("stop_container")
        return nri_pb2.StopContainerResponse()

    def state_change(self, req):
        self.calls.append("state_change")
        self.events.append(req.event)

    def disconnected(self) -> None:
        self.calls.append("disconnected")
        self.disconnects += 1


# --- what a runtime sends about pods and containers, kubelet-style -------------------------


def nri_pod(uid: str, qos: str = "", name: str | None = None) -> nri_pb2.PodSandbox:
    """A pod sandbox in namespace ``ns`` under the kubelet's cgroup parent for ``qos``
    ("" = Guaranteed, "burstable", "besteffort")."""
    p = nri_pb2.PodSandbox(id="sb-" + uid, name=uid if name is None else name, uid=uid,
                           namespace="ns")
    p.linux.cgroup_parent = f"/kubepods/{qos + '/' if qos else ''}pod{uid}"
    return p


def nri_container(uid: str, cpus_m: int = 0, cpus: str = "", *, cid: str = "",
                  name: str = "app", state: int = nri_pb2.CONTAINER_RUNNING,
                  memory: int = 1 << 28) -> nri_pb2.Container:
    """Container ``name`` of pod ``uid`` as the runtime reports it: ``cpu.shares`` from a
    request of ``cpus_m`` millicores (the kubelet's request * 1024 / 1000, at least 2), and,
    when ``cpus_m``, quota/period for the same limit and a ``memory`` limit (bytes);
    ``cpus``: the cpuset it runs on."""
    c = nri_pb2.Container(id=cid or "c-" + uid, pod_sandbox_id="sb-" + uid, name=name,
                          state=state)
    c.labels["io.kubernetes.container.name"] = name
    r = c.linux.resources
    r.cpu.shares.value = max(2, cpus_m * 1024 // 1000)
    if cpus_m:
        r.cpu.quota.value = cpus_m * 100
        r.cpu.period.value = 100000
        r.memory.limit.value = memory
    if cpus:
        r.cpu.cpus = cpus
    return c


def serve_plugin(plugin, workdir: Path, body) -> object:
    """Run ``plugin`` behind a Stub connected to a FakeRuntime on ``workdir/nri.sock`` and
    await ``body(conn, plugin)`` (conn: the runtime's PeerConn); close the plugin after it.
    Returns the plugin; 30 s for the whole run."""
    from nri_cpumgr.runtime.plugin import EVENTS
    from nri_cpumgr.transport.stub import Stub

    async def main() -> None:
        rt = FakeRuntime(workdir / "nri.sock")
        await rt.start()
        stub = Stub(plugin, name="cpumgr", idx="90", socket_path=str(workdir / "nri.sock"),
                    events=EVENTS)
        plugin.sender = stub.update_containers
        task = asyncio.create_task(stub.run())
        try:
            await body(await rt.next_conn(), plugin)
        finally:
            stub.stop()
            await asyncio.wait_for(task, 5)
            await rt.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
    plugin.close()
    return plugin
