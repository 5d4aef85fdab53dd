"""Sends the shared-pool updates after the replies: the plugin's own UpdateContainers calls,
or CRI UpdateContainerResources calls on a worker thread (``cri``, :mod:`.cri`).

:class:`SharedPoolSync` drives a :class:`~nri_cpumgr.poolsync.planner.PoolPlanner` on the
event loop. The runtime glue tells it what happened (a shared container created, a container
stopped or removed, the shared pool changed, an exclusive container admitted or started) in
O(1) each; one task wakes when the planner says so and sends each batch through ``send`` (an
``async (payload: bytes) -> set[str]`` of failed container ids, raising ``ConnectionError``
when the runtime is gone), given by whoever owns the connection: this module never imports
the transport.

One serialized update body per (cpuset, mems) serves every container of a batch: the
``UpdateContainersRequest`` is assembled from the body and each container id (protobuf
fields may come in any order, so ``container_id`` is prepended to a pre-serialized
``ContainerUpdate`` that carries everything else).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from nri_cpumgr import aio as asyncio  # (asyncio at the first use: nri_cpumgr.aio)
from nri_cpumgr.api import nri_pb2
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.poolsync.planner import Batch, PoolPlanner

log = logging.getLogger("nri_cpumgr.poolsync")

#: CRI-O's answer to UpdateContainerResources for a container its CreateContainer has not
#: finished (lower case)
_NOT_YET_CREATED = "is not yet created"
_UPDATE_FIELD = nri_pb2.UpdateContainersRequest.DESCRIPTOR.fields_by_name["update"].number
_ID_FIELD = nri_pb2.ContainerUpdate.DESCRIPTOR.fields_by_name["container_id"].number
_LEN = 2  # protobuf wire type of length-delimited fields


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


_UPDATE_TAG = _varint(_UPDATE_FIELD << 3 | _LEN)
_ID_TAG = _varint(_ID_FIELD << 3 | _LEN)


def update_body(cpus: CPUSet, mems: str = "", quota: int | None = None) -> bytes:
    """A serialized ``ContainerUpdate`` without its ``container_id``: cpuset ``cpus``
    (and ``mems`` when given, the CFS ``quota`` when given), ``ignore_failure`` set (a
    container that vanished must not fail the others)."""
    u = nri_pb2.ContainerUpdate(ignore_failure=True)
    u.linux.resources.cpu.cpus = str(cpus)
    if mems:
        u.linux.resources.cpu.mems = mems
    if quota is not None:
        u.linux.resources.cpu.quota.value = quota
    return u.SerializeToString()


def encode_updates(items: list[tuple[str, bytes]], tag: bytes = _UPDATE_TAG) -> bytes:
    """A serialized ``UpdateContainersRequest`` of ``(container id, update_body(...))``
    (``tag``: the key of another message's repeated ``ContainerUpdate`` field instead)."""
    parts = []
    for cid, body in items:
        b = cid.encode()
        one = _ID_TAG + _varint(len(b)) + b + body
        parts.append(tag + _varint(len(one)) + one)
    return b"".join(parts)


#: Update paths: ``async``, the plugin's own UpdateContainers calls after the replies;
#: ``cri``, CRI UpdateContainerResources calls after the replies, made by a worker thread
#: (:class:`nri_cpumgr.poolsync.cri.CRIUpdater`); ``reply``, only in replies to the
#: runtime's calls (see :meth:`SharedPoolSync.into_reply`).
#: ``sharedPoolUpdateMode: auto`` (the default) picks one per runtime at Configure
#: (:func:`nri_cpumgr.poolsync.runtimes.choose_update_mode`).
MODES = ("async", "cri", "reply")


Sender = Callable[[bytes], Awaitable[set[str]]]
#: Seconds from a pod event to the re-plan it causes (see SharedPoolSync._kick); with the
#: defaults nothing of a pass is due sooner than 0.25 s after an event (the quiet time;
#: ``sharedPoolShrinkDelay`` 1 s).
REPLAN_AFTER = 0.001
#: ``cri`` mode: ``async (cpus, [(container id, mems)]) -> Outcome`` (CRIUpdater.send).
CRISender = Callable[[str, list[tuple[str, str]]], Awaitable[Any]]


class SharedPoolSync:
    """Keeps every shared-pool container on the shared pool, outside the runtime's calls.

    ``shrink_delay``, ``grow_delay`` (seconds) and ``batch_size`` as in
    :class:`PoolPlanner`; ``batch_gap`` (seconds) between two UpdateContainers calls of a
    pass. ``mode`` (one of :data:`MODES`): ``reply`` never calls UpdateContainers; the
    runtime glue adds the due updates to its replies with :meth:`into_reply`; ``cri``
    sends each batch through a :data:`CRISender` (given to :meth:`connected`) instead of
    UpdateContainers. Call everything on the event loop thread.
    """

    def __init__(
        self,
        *,
        shrink_delay: float = 1.0,
        grow_delay: float = 10.0,
        batch_size: int = 10,
        quiet: float = 0.25,
        batch_gap: float = 0.01,
        mode: str = "async",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"shared pool update mode {mode!r}: expected one of {MODES}")
        self.mode = mode
        self._batch_gap = batch_gap
        self._connected = False
        self.planner = PoolPlanner(shrink_delay=shrink_delay, grow_delay=grow_delay,
                                   batch_size=batch_size, quiet=min(quiet, shrink_delay))
        self._clock = clock
        self._send: Any = None  # Sender, or CRISender in cri mode
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._soon = False
        self._bodies: dict[tuple[CPUSet, str], bytes] = {}
        self._pass_t0: float | None = None
        self._pass_n = 0
        self._pass_calls = 0
        self._pass_held = 0.0  # cri: seconds the pass's calls yielded to pod operations

    # ------------------------------------------------------------------ connection
    def connected(self, send: Sender | CRISender, target: CPUSet,
                  shared: dict[str, tuple[CPUSet, str]]) -> None:
        """The runtime synchronized: ``shared`` = container id -> (cpuset the runtime has
        after the Synchronize reply, mems); ``send``: a :data:`Sender`, a :data:`CRISender`
        in ``cri`` mode. Starts the sender task (needs a running loop)."""
        self.planner.reset(target, shared, self._clock())
        self._connected = True
        self._soon = False
        if self.mode == "reply":
            return
        self._send = send
        self._kick()

    def set_mode(self, mode: str) -> None:
        """Switch to ``mode`` (one of :data:`MODES`; the runtime that configured the plugin
        decides it, see :mod:`nri_cpumgr.poolsync.runtimes`). Call it at Configure, before
        the runtime synchronizes: a change drops the connection state as
        :meth:`disconnected` does (the next :meth:`connected` starts over). Raises
        ValueError for another mode."""
        if mode not in MODES:
            raise ValueError(f"shared pool update mode {mode!r}: expected one of {MODES}")
        if mode != self.mode:
            self.disconnected()
            self.mode = mode

    def disconnected(self) -> None:
        """Stop sending; what is still stale is rebuilt by the next Synchronize."""
        self._connected = False
        self._send = None
        self._soon = False
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        self.disconnected()

    # ------------------------------------------------------------------ events
    def add(self, cid: str, cpus: CPUSet, mems: str = "", created: bool = False) -> None:
        self.planner.add(cid, cpus, mems, self._clock(), created)

    def discard(self, cid: str) -> None:
        self.planner.discard(cid)

    def allocated(self, cid: str) -> None:
        self.planner.allocated(cid, self._clock())

    def started(self, cid: str) -> None:
        was_pending = cid in self.planner.pending_start
        if self.planner.started(cid, self._clock()) or was_pending:
            self._kick()

    def set_target(self, pool: CPUSet) -> None:
        if pool.mask != self.planner.target.mask:  # (the masks: no 255-CPU sets compared)
            self.planner.set_target(pool, self._clock())
            self._kick()

    def into_reply(self, resp: Any) -> int:
        """Reply mode: add the due updates to ``resp.update`` (the repeated
        ``ContainerUpdate`` of a CreateContainer, UpdateContainer or StopContainer
        response); returns how many. A shrink is always due (the reply of the allocation
        carries it, so the bound is zero but the runtime applies it inside that call), a
        growth after ``grow_delay`` (it waits for the next such reply: StateChange events
        have no reply to carry it)."""
        if self.mode != "reply" or not self._connected:
            return 0
        batch = self.planner.take_all(self._clock())
        if batch is None:
            return 0
        field = type(resp).DESCRIPTOR.fields_by_name["update"].number
        tag = _varint(field << 3 | _LEN)
        resp.MergeFromString(encode_updates(self._items(batch), tag))
        log.info("shared pool: %d containers moved to %s in the reply", len(batch.ids),
                 batch.cpus)
        return len(batch.ids)

    def _items(self, batch: Batch) -> list[tuple[str, bytes]]:
        items = []
        for cid in batch.ids:
            key = (batch.cpus, batch.mems.get(cid, ""))
            body = self._bodies.get(key)
            if body is None:
                if len(self._bodies) > 64:
                    self._bodies.clear()
                body = self._bodies[key] = update_body(*key)
            items.append((cid, body))
        return items

    # ------------------------------------------------------------------ the sender task
    # Events only mark the plan dirty; one callback re-plans :data:`REPLAN_AFTER` after the
    # first of them, and a timer (not a waiting task) wakes it when the next pass is due: an
    # event costs a timer, not a task switch. The re-plan waits that long so that the loop
    # reads the runtime's next request first (a pod's create, start, stop and removal come
    # a fraction of a millisecond apart: one re-plan for them, after their replies, not one
    # per event right behind each reply). A pass runs as a task, batch after batch, while
    # batches are due.
    def _kick(self) -> None:
        if self._send is None or self._soon or self._busy():
            return  # a running pass re-plans after each batch
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (tests driving the glue synchronously): nothing is sent
        self._soon = True
        loop.call_later(REPLAN_AFTER, self._replan)

    def _busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def _replan(self) -> None:
        self._soon = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._send is None or self._busy():
            return
        batch, at = self.planner.plan(self._clock())
        if batch is not None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(batch), name="shared-pool-sync")
            return
        self._idle(at)

    def _idle(self, at: float | None) -> None:
        if self._pass_t0 is not None and not self.planner.in_pass:
            self._log_pass()
        if at is not None:
            self._timer = asyncio.get_running_loop().call_later(
                max(0.0, at - self._clock()), self._replan)

    async def _run(self, batch: Batch | None) -> None:
        while batch is not None and self._send is not None:
            await self._send_batch(batch)
            if self._batch_gap > 0 and self.mode == "async":
                # containerd 1.7.24 / 2.1.9 (NRI v0.6.1 / v0.8.0): a CRI call that waited for
                # that batch takes containerd's local NRI lock as the batch ends and the
                # Adaptation lock right after; an UpdateContainers taking the Adaptation lock
                # in between deadlocks both (containerd/containerd#13733): give it that moment
                await asyncio.sleep(self._batch_gap)
            if self._send is None:
                return
            batch, at = self.planner.plan(self._clock())
            if batch is None:
                self._idle(at)

    async def _send_batch(self, batch: Batch) -> None:
        send = self._send
        if send is None:
            self.planner.abandon(batch)
            return
        if self._pass_t0 is None:
            self._pass_t0, self._pass_n, self._pass_calls = self._clock(), 0, 0
            self._pass_held = 0.0
        if self.mode == "cri":
            await self._send_cri(send, batch)
            return
        items = self._items(batch)
        try:
            failed = await send(encode_updates(items))
        except ConnectionError as e:
            log.warning("shared pool: UpdateContainers not sent (%s); the next Synchronize "
                        "repairs it", e)
            self.planner.abandon(batch)
            self._send = None
            return
        except TimeoutError as e:
            # containerd 1.7.24 / 2.1.9 (NRI v0.6.1 / v0.8.0) take their two NRI locks in the
            # opposite order for a plugin's UpdateContainers and for CRI calls: if one
            # overlapped, the runtime's NRI may be stuck for good (containerd/containerd#13733,
            # fixed by containerd/nri#301). Or the runtime is slower than the deadline (the
            # sender's deadline grows then). Say so loudly; retried by the next pass.
            log.error("shared pool: UpdateContainers of %d containers got no answer%s: a "
                      "slow runtime, or its NRI is deadlocked (containerd before 2.4: "
                      "containerd/containerd#13733, fixed by containerd/nri#301); check "
                      "`crictl ps` on this node", len(batch.ids), f" ({e})" if str(e) else "")
            self.planner.done(batch, set(batch.ids), self._clock(), answered=False)
            self._pass_calls += 1
            return
        except Exception as e:  # a refused call: retried by the next pass
            log.warning("shared pool: UpdateContainers of %d containers failed: %s",
                        len(batch.ids), e)
            failed = set(batch.ids)
        dropped = self.planner.done(batch, failed, self._clock())
        self._pass_n += len(batch.ids) - len(failed & set(batch.ids))
        self._pass_calls += 1
        if failed:
            log.warning("shared pool: the runtime could not update %s", sorted(failed))
        if dropped:
            log.warning("shared pool: giving up on %s after repeated failures (gone?)",
                        sorted(dropped))

    async def _send_cri(self, send: CRISender, batch: Batch) -> None:
        """``cri`` mode: one CRI UpdateContainerResources per container of ``batch``, on the
        worker thread. Gone containers leave the plan (not an error); unanswered ones stay
        stale for the next pass and are never dropped for it; refused ones count as the
        runtime's failures (dropped after ``max_failures``)."""
        cpus = str(batch.cpus)
        try:
            out = await send(cpus, [(cid, batch.mems.get(cid, "")) for cid in batch.ids])
        except Exception as e:  # noqa: BLE001 - the worker itself failed: retried next pass
            log.error("shared pool: CRI UpdateContainerResources of %d containers not sent: "
                      "%s", len(batch.ids), e)
            self.planner.done(batch, set(batch.ids), self._clock(), answered=False)
            self._pass_calls += 1
            return
        if self._send is not send:
            return  # disconnected (or reconnected) meanwhile: a Synchronize started over
        self._pass_calls += len(batch.ids) - len(out.unanswered) + (1 if out.error else 0)
        self._pass_held += getattr(out, "held", 0.0)
        gone = set(out.gone)
        for cid in out.gone:
            if cid in self.planner.unstarted:
                # created but maybe not yet in the runtime's store: a failure (retried),
                # not gone; its RemoveContainer or its start settles it
                out.failed[cid] = "not found (not started yet)"
                gone.discard(cid)
            else:
                self.planner.discard(cid)
        for cid in [c for c, why in out.failed.items() if _NOT_YET_CREATED in why.lower()]:
            if cid in self.planner.unstarted:
                # CRI-O refuses an update while its CreateContainer is under way (CRI-O
                # v1.36.3 internal/lib/container.go, GetContainerFromShortID: "specified
                # container <id> is not yet created"; 45 times in 10 minutes of
                # tests/e2e/stress.py --version crio, and 6 containers dropped as gone): the
                # container starts on the cpuset of its creation, and its start sends it again
                # as for any container updated before its start (PoolPlanner.started), so this
                # is neither a failure nor a reason to drop it
                del out.failed[cid]
        answered = [cid for cid in batch.ids if cid not in out.unanswered and cid not in gone]
        now = self._clock()
        if out.unanswered:
            log.error("shared pool: CRI UpdateContainerResources on %s got no answer for %d "
                      "containers (%s); retried by the next pass", self._cri_where(send),
                      len(out.unanswered), out.error)
        if gone:
            log.debug("shared pool: %d containers gone or being removed: %s", len(gone),
                      sorted(gone))
        if out.unanswered:
            lost = [cid for cid in batch.ids if cid in out.unanswered and cid not in gone]
            self.planner.done(Batch(batch.cpus, lost, batch.mems, batch.shrink,
                                    batch.unstarted, batch.prior), set(lost), now,
                              answered=False)
        sub = Batch(batch.cpus, answered, batch.mems, batch.shrink, batch.unstarted)
        dropped = self.planner.done(sub, set(out.failed), now)
        self._pass_n += len(answered) - len(out.failed)
        if out.failed:
            log.warning("shared pool: the runtime could not update %s",
                        "; ".join(f"{cid}: {why}" for cid, why in sorted(out.failed.items())))
        if dropped:
            log.warning("shared pool: giving up on %s after repeated failures (gone?)",
                        sorted(dropped))

    @staticmethod
    def _cri_where(send: Any) -> str:
        owner = getattr(send, "__self__", None)
        return getattr(owner, "endpoint", "the CRI socket")

    def _log_pass(self) -> None:
        assert self._pass_t0 is not None
        what = ("CRI UpdateContainerResources" if self.mode == "cri" else "UpdateContainers")
        held = (f", {self._pass_held * 1e3:.0f} ms of it yielding to pod operations"
                if self._pass_held >= 0.0005 else "")
        log.info("shared pool: %d containers moved to %s in %d %s calls "
                 "(%.0f ms%s)", self._pass_n, self.planner.target, self._pass_calls, what,
                 (self._clock() - self._pass_t0) * 1e3, held)
        self._pass_t0 = None
