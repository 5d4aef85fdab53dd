"""Shared-pool passes as CRI ``UpdateContainerResources`` calls (``sharedPoolUpdateMode: cri``).

The kubelet's CPU manager moves shared containers this way from its reconcile loop
(``pkg/kubelet/cm/cpumanager/cpu_manager.go``, ``reconcileState`` -> ``updateContainerCPUSet``,
v1.37.2): one ``UpdateContainerResources`` per container over the runtime's CRI socket,
carrying only ``cpuset_cpus`` (and here ``cpuset_mems`` where the Memory Manager pinned the
container). Every other field of the request is zero, and both containerd
(``WithResources``) and CRI-O (``toOCIResources``) leave a zero field as it is, so the CPU
shares, CFS quota and memory limit of a Burstable container are untouched.

Why this path is safe where the plugin's own NRI UpdateContainers is not: a CRI call takes
containerd's NRI lock and then the Adaptation's, the same order as every other CRI call, and
the ``runc update`` runs after both are released (docs/concepts/nri-lock-order.md). The
runtime shows the call to the plugin as an NRI UpdateContainer, which the plugin answers at
once from its own state, on its event loop: the calls themselves run on worker threads of
their own (:class:`CRIUpdater`), never on the event loop, so that answer never waits for them;
each call waits first until the node's pod operations have been quiet a few tens of ms
(bounded: :mod:`nri_cpumgr.poolsync.activity`).

gRPC is grpcio, imported on the worker thread when the mode is chosen (:meth:`CRIUpdater.warm`,
off the event loop): a plugin in another mode never loads it (its cost:
docs/concepts/shared-pool.md, "The CRI path").
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import socket
import stat
import threading
from pathlib import Path
from typing import Any

from nri_cpumgr import aio as asyncio  # (asyncio at the first use: nri_cpumgr.aio)
from nri_cpumgr.api import cri_pb2
from nri_cpumgr.poolsync.activity import NodeActivity

log = logging.getLogger("nri_cpumgr.poolsync")

#: The gRPC method: the CRI's own service name (k8s.io/cri-api runtime.v1), not our schema's
#: package (proto/cri.proto says why they differ).
UPDATE_METHOD = "/runtime.v1.RuntimeService/UpdateContainerResources"
VERSION_METHOD = "/runtime.v1.RuntimeService/Version"
#: CRI calls of one batch in flight at once: while one container's call waits for the
#: runtime's NRI round trip to the plugin, another's ``runc update`` runs (measured at 250
#: shared containers: docs/development/measurements.md)
PARALLEL = 1
#: seconds one UpdateContainerResources may take (the runtime's NRI UpdateContainer to us,
#: then one ``runc update``: ~10 ms on an idle node)
CALL_TIMEOUT = 10.0

# what the runtimes answer for a container that is gone, stopping or being removed
# (containerd: NotFound "an error occurred when try to find container"; "container is in
# removing state"; "cannot update a stopped container", "cannot update a deleted process",
# runc's "container not running" (all seen under churn: tests/e2e/stress.py); CRI-O: "could
# not find container", "container ... is not running")
_GONE_WORDS = ("not found", "notfound", "could not find", "removing", "does not exist",
               "no such container", "stopped container", "deleted process", "not running")


def probe(path: str, timeout: float = 0.2) -> str | None:
    """Why the CRI socket ``path`` cannot be used (one phrase for the log), None when a
    connection to it succeeds. No gRPC: a plain ``connect`` on the unix socket, well under a
    millisecond on a node."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path} does not exist (not mounted into the plugin's container?)"
    except OSError as e:
        return f"{path}: {e.strerror or e}"
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a socket"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
    except OSError as e:
        return f"cannot connect to {path}: {e.strerror or e}"
    finally:
        s.close()
    return None


@dataclasses.dataclass
class Outcome:
    """What the runtime answered for the containers of one batch: ``failed`` (refused: id ->
    the runtime's message), ``gone`` (the runtime does not know the container, or it is
    being removed: not an error), ``unanswered`` (no answer in time, or the socket went away:
    nothing known to be applied). The other ids were updated."""

    failed: dict[str, str] = dataclasses.field(default_factory=dict)
    gone: set[str] = dataclasses.field(default_factory=set)
    unanswered: set[str] = dataclasses.field(default_factory=set)
    error: str = ""  # why the rest was unanswered (the first transport error)
    held: float = 0.0  # seconds the calls waited for the node's pod operations


def take_in_flight(journal: Path) -> set[str]:
    """The container ids of a batch whose calls had not all ended when the plugin died (the
    journal :class:`CRIUpdater` keeps), and the journal removed; empty when there is none.

    Why: a client that dies during an ``UpdateContainerResources`` cancels it, and containerd
    2.1.9 can then answer ``context canceled`` with the cgroup already changed and the spec
    reset to the old cpuset (seen in tests/e2e/test_kill_churn.py): the next Synchronize
    shows the spec, so these containers are sent again whatever it shows."""
    try:
        text = journal.read_text()
    except OSError:
        return set()
    try:
        journal.unlink()
    except OSError:
        pass
    return {line for line in text.split() if line}


class CRIUpdater:
    """One CRI client on ``endpoint`` (a unix socket path) and the worker thread that makes
    its calls. :meth:`send` is awaited on the event loop; the calls of a batch run on the
    worker, ``parallel`` in flight (the worker and ``parallel - 1`` helper threads; ValueError
    below 1), each held first while the node's pod operations go on (``activity``:
    :class:`~nri_cpumgr.poolsync.activity.NodeActivity`, bounded; None: never held).
    ``journal``: a file holding the ids of the batch under way (written before its first
    call, removed after its last: :func:`take_in_flight`)."""

    def __init__(self, endpoint: str, timeout: float = CALL_TIMEOUT,
                 journal: Path | None = None, activity: NodeActivity | None = None,
                 parallel: int = PARALLEL) -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.journal = journal
        self.activity = activity
        if parallel < 1:
            raise ValueError(f"parallel CRI calls: {parallel}, expected at least 1")
        self.parallel = parallel
        self._helpers: concurrent.futures.ThreadPoolExecutor | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="cri-shared-pool")
        self._channel: Any = None
        self._update: Any = None
        self._grpc: Any = None
        self.calls = 0  # UpdateContainerResources calls made (answered or not)

    # ------------------------------------------------------------------ worker thread
    def _connect(self) -> Any:
        if self._update is None:
            # grpcio's import loads asyncio: without ssl, as the plugin's (on this thread
            # while the plugin still answers its first requests without the event loop)
            asyncio.import_asyncio()
            import grpc  # only in this mode (its import and memory: see the module docstring)

            self._grpc = grpc
            self._channel = grpc.insecure_channel(
                f"unix://{self.endpoint}",
                options=[("grpc.enable_http_proxy", 0), ("grpc.enable_retries", 0)])
            self._update = self._channel.unary_unary(
                UPDATE_METHOD,
                request_serializer=cri_pb2.UpdateContainerResourcesRequest.SerializeToString,
                response_deserializer=cri_pb2.UpdateContainerResourcesResponse.FromString,
            )
        return self._update

    def update_all(self, cpus: str, items: list[tuple[Any, ...]]) -> Outcome:
        """Worker thread: one ``UpdateContainerResources`` per ``(container id, mems)`` with
        ``cpuset_cpus = cpus`` (and ``cpuset_mems = mems`` when not ""; an item's third
        value, when not None, is a CFS quota to set: nri_cpumgr.runtime.reconfig). After a transport
        failure (no answer in time, socket gone) the rest of the batch is not tried."""
        out = Outcome()
        try:
            call = self._connect()
        except Exception as e:  # noqa: BLE001 - grpcio missing or broken: nothing sent
            out.unanswered.update(it[0] for it in items)
            out.error = f"no CRI client: {e}"
            return out
        self._journal([it[0] for it in items])
        try:
            return self._update_all(call, cpus, items, out)
        finally:
            self._journal(None)

    def _journal(self, ids: list[str] | None) -> None:
        """Worker thread: record the batch under way (None: none). No fsync: it guards
        against the death of this process, whose writes the page cache keeps."""
        if self.journal is None:
            return
        try:
            if ids is None:
                self.journal.unlink(missing_ok=True)
            else:
                tmp = self.journal.with_name(self.journal.name + ".tmp")
                tmp.write_text("\n".join(ids) + "\n")
                os.replace(tmp, self.journal)
        except OSError as e:
            log.warning("shared pool: cannot write %s: %s", self.journal, e)

    def _update_all(self, call: Any, cpus: str, items: list[tuple[Any, ...]],
                    out: Outcome) -> Outcome:
        """The calls of one batch, ``parallel`` in flight (this thread and helpers), each
        after :meth:`NodeActivity.hold`. After a transport failure no further call starts;
        the items not started count as unanswered."""
        lock = threading.Lock()
        state = {"next": 0, "stop": False}

        def run() -> None:
            while True:
                with lock:
                    i = state["next"]
                    if state["stop"] or i >= len(items):
                        return
                    state["next"] = i + 1
                # the node's pod operations first (bounded)
                held = self.activity.hold() if self.activity is not None else 0.0
                kind, text = self._one(call, cpus, items[i])
                cid = items[i][0]
                with lock:
                    self.calls += 1
                    out.held += held
                    if kind == "gone":
                        out.gone.add(cid)
                    elif kind == "failed":
                        out.failed[cid] = text
                    elif kind == "unanswered":
                        out.unanswered.add(cid)
                        out.error = out.error or text
                        state["stop"] = True

        n = min(self.parallel, len(items))
        if n > 1:
            if self._helpers is None:
                self._helpers = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.parallel - 1, thread_name_prefix="cri-shared-pool-helper")
            futures = [self._helpers.submit(run) for _ in range(n - 1)]
            run()
            for f in futures:
                f.result()
        else:
            run()
        if state["stop"]:
            out.unanswered.update(it[0] for it in items[state["next"]:])
        return out

    def _one(self, call: Any, cpus: str, item: tuple[Any, ...]) -> tuple[str, str]:
        """One ``UpdateContainerResources``: ``("ok", "")``, ``("gone", text)``,
        ``("failed", "CODE: text")`` or ``("unanswered", "CODE: text")``."""
        grpc = self._grpc
        cid, mems = item[0], item[1]
        req = cri_pb2.UpdateContainerResourcesRequest(container_id=cid)
        req.linux.cpuset_cpus = cpus
        if mems:
            req.linux.cpuset_mems = mems
        if len(item) > 2 and item[2] is not None:  # (a CFS quota: reconfiguration)
            req.linux.cpu_quota = item[2]
        try:
            call(req, timeout=self.timeout, wait_for_ready=False)
        except grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            text = (e.details() if hasattr(e, "details") else "") or str(code)
            if code == grpc.StatusCode.NOT_FOUND or any(w in text.lower() for w in _GONE_WORDS):
                return "gone", text
            if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE,
                        grpc.StatusCode.CANCELLED):
                return "unanswered", f"{code.name}: {text}" if code is not None else text
            return "failed", f"{code.name if code is not None else '?'}: {text}"
        return "ok", ""

    def warm(self) -> None:
        """Import grpcio and open the channel on the worker thread now (returns at once), so
        that the first pass does not pay for them; errors surface at the first call."""
        def connect() -> None:
            try:
                self._connect()
            except Exception:  # noqa: BLE001 - said by the first call's outcome
                pass

        self._executor.submit(connect)

    # ------------------------------------------------------------------ event loop
    async def send(self, cpus: str, items: list[tuple[Any, ...]]) -> Outcome:
        """Run :meth:`update_all` on the worker thread; the event loop goes on meanwhile (it
        answers the NRI UpdateContainer each call causes)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.update_all, cpus, items)

    def version(self) -> tuple[str, str]:
        """``(runtime_name, runtime_version)`` from the CRI ``Version`` call (blocking: a
        check for tools and tests, never called on the event loop). Raises grpc.RpcError."""
        self._connect()
        call = self._channel.unary_unary(
            VERSION_METHOD,
            request_serializer=cri_pb2.VersionRequest.SerializeToString,
            response_deserializer=cri_pb2.VersionResponse.FromString,
        )
        r = call(cri_pb2.VersionRequest(version="v1"), timeout=self.timeout)
        return r.runtime_name, r.runtime_version

    def close(self) -> None:
        """Stop the worker (a call in flight finishes on its own) and the channel."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._helpers is not None:
            self._helpers.shutdown(wait=False, cancel_futures=True)
        if self._channel is not None:
            try:
                self._channel.close()
            except Exception:  # noqa: BLE001 - closing a channel of a gone runtime
                pass
            self._channel = self._update = None
