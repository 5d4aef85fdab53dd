"""Shared-pool updates after the replies: the planner's rules on a fake clock, the wire
encoding, and the whole plugin against the fake runtime (tests/unit/nri_peer.py)."""

from __future__ import annotations

import asyncio
import time

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.poolsync import PoolPlanner, encode_updates, update_body

from .test_runtime_plugin import STATIC, cpus_of, ctr, pod, run

ALL, SHRUNK = CPUSet({0, 1, 2, 3}), CPUSet({0, 1, 2})


def planner(n: int = 5, **kw) -> PoolPlanner:
    p = PoolPlanner(shrink_delay=1.0, grow_delay=10.0, batch_size=2, quiet=0.25, **kw)
    p.reset(ALL, {f"s{i}": (ALL, "") for i in range(n)}, now=0.0)
    return p


def drain(p: PoolPlanner, now: float) -> list[list[str]]:
    """Every batch due at ``now`` (each answered at once)."""
    out = []
    while True:
        b, _ = p.plan(now)
        if b is None:
            return out
        p.done(b, set(), now)
        out.append(b.ids)


def test_encoding_is_an_update_containers_request():
    body = update_body(CPUSet({0, 2, 3}), "1")
    data = encode_updates([("a", body), ("ctr-" + "x" * 200, body)])
    req = nri_pb2.UpdateContainersRequest.FromString(data)
    assert [u.container_id for u in req.update] == ["a", "ctr-" + "x" * 200]
    for u in req.update:
        assert u.ignore_failure
        assert (u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems) == ("0,2-3", "1")
        assert not u.linux.resources.cpu.HasField("quota")
    assert encode_updates([]) == b""


def test_shrink_waits_for_the_start_then_quiet_and_goes_in_batches():
    p = planner()
    p.allocated("g", 0.0)
    p.set_target(SHRUNK, 0.0)
    assert p.plan(0.1) == (None, 1.0)  # waiting for g's start, at most shrink_delay
    p.started("g", 0.2)
    assert p.plan(0.3) == (None, 0.45)  # started: a quiet moment, then go
    batches = drain(p, 0.45)
    assert [len(b) for b in batches] == [2, 2, 1] and p.stale_count() == 0
    assert p.passes == 1 and p.sent == 5
    assert all(s.applied == SHRUNK for s in p.shared.values())


def test_a_container_that_never_starts_delays_the_shrink_by_the_bound_only():
    p = planner()
    p.allocated("g", 0.0)
    p.set_target(SHRUNK, 0.0)
    assert p.plan(0.99)[0] is None
    assert sum(map(len, drain(p, 1.0))) == 5


def test_release_then_allocation_of_the_same_cpus_costs_nothing():
    p = planner()
    p.set_target(SHRUNK, 0.0)  # e.g. a shrink already applied
    drain(p, 5.0)
    sent = p.sent
    p.set_target(ALL, 6.0)  # a release: growth is lazy
    assert p.plan(6.5) == (None, 16.0)
    p.allocated("g2", 7.0)
    p.set_target(SHRUNK, 7.0)  # the next pod takes the same CPU
    assert p.plan(20.0) == (None, None)
    assert p.sent == sent


def test_growth_waits_grow_delay_and_a_shrink_pass_takes_it_along():
    p = planner(n=3)
    p.set_target(CPUSet({0, 1}), 0.0)
    drain(p, 1.0)
    p.set_target(CPUSet({0, 1, 2}), 2.0)  # release of 2
    assert p.plan(3.0) == (None, 12.0)
    assert sum(map(len, drain(p, 12.0))) == 3
    assert all(s.applied == CPUSet({0, 1, 2}) for s in p.shared.values())


def test_burst_of_ten_allocations_is_at_most_three_updates_per_container():
    """Pods arriving every 0.2 s for 2 s; batches take 0.1 s of runtime time each."""
    p = planner(n=40)
    p.batch_size = 10
    counts: dict[str, int] = {}
    now, pool = 0.0, set(ALL | CPUSet(range(4, 16)))
    p.reset(CPUSet(pool), {f"s{i}": (CPUSet(pool), "") for i in range(40)}, now)
    arrivals = [0.2 * k for k in range(10)]
    while now < 30.0:
        while arrivals and arrivals[0] <= now:
            t = arrivals.pop(0)
            cpu = 15 - len(arrivals)
            pool.discard(cpu)
            p.allocated(f"g{cpu}", t)
            p.set_target(CPUSet(pool), t)
            p.started(f"g{cpu}", t + 0.07)
        b, _ = p.plan(now)
        if b is None:
            now += 0.01
            continue
        now += 0.1
        p.done(b, set(), now)
        for cid in b.ids:
            counts[cid] = counts.get(cid, 0) + 1
    assert p.stale_count() == 0
    assert all(s.applied == CPUSet(pool) for s in p.shared.values())
    assert max(counts.values()) <= 3, counts


def test_failures_are_retried_then_dropped():
    p = planner(n=1)
    p.set_target(SHRUNK, 0.0)
    for attempt in range(3):
        b, _ = p.plan(100.0 * (attempt + 1))
        assert b is not None and b.ids == ["s0"]
        dropped = p.done(b, {"s0"}, 100.0 * (attempt + 1))
        p.plan(100.0 * (attempt + 1))  # ends the pass
    assert dropped == ["s0"] and "s0" not in p.shared


def test_discarded_and_abandoned():
    p = planner(n=2)
    p.set_target(SHRUNK, 0.0)
    b, _ = p.plan(1.0)
    assert b is not None
    p.abandon(b)  # connection lost: nothing applied, still stale
    assert p.stale_count() == 2
    p.discard("s0")
    assert p.stale_count() == 1 and p.overlapping(CPUSet({3})) == ["s1"]


def test_reply_mode_takes_a_shrink_at_once_and_a_growth_after_the_grow_delay():
    p = planner(n=3)
    assert p.take_all(0.0) is None
    p.allocated("g", 0.0)
    p.set_target(SHRUNK, 0.0)
    b = p.take_all(0.0)  # no wait for the start, no quiet period: the reply is the moment
    assert b is not None and sorted(b.ids) == ["s0", "s1", "s2"] and b.cpus == SHRUNK
    assert p.stale_count() == 0 and p.take_all(0.1) is None
    p.set_target(ALL, 1.0)  # a release
    assert p.take_all(10.9) is None
    p.set_target(SHRUNK, 2.0)  # re-taken within the grow delay: nothing to send
    assert p.take_all(30.0) is None
    p.set_target(ALL, 31.0)
    b = p.take_all(41.0)
    assert b is not None and len(b.ids) == 3 and b.cpus == ALL
    assert p.sent == 6


# ---------------------------------------------------------------- through the plugin

# the plugin's own UpdateContainers calls (the fake runtime is not known to be free of the
# NRI lock-order inversion: "auto" would pick "reply" there)
FAST = STATIC + "sharedPoolShrinkDelay: 2s\nsharedPoolUpdateMode: async\n"


def _guaranteed(uid: str) -> nri_pb2.CreateContainerRequest:
    return nri_pb2.CreateContainerRequest(pod=pod(uid), container=ctr(uid, 1000))


def test_reply_carries_no_other_container_and_the_shrink_follows_the_start(workdir):  # noqa: F811
    async def body(conn, plugin):
        await conn.handshake(pods=[pod("be", "besteffort"), pod("bu", "burstable")],
                             containers=[ctr("be", 0, "0-1"), ctr("bu", 0, "0-1")])
        resp = await conn.call("CreateContainer", _guaranteed("g"),
                               nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "1"
        assert len(resp.update) == 0
        await asyncio.sleep(0.5)  # waiting for the container's start (bound: 2 s)
        assert conn.updates.empty()
        t0 = time.monotonic()
        ev = nri_pb2.StateChangeEvent(event=nri_pb2.POST_START_CONTAINER, pod=pod("g"),
                                      container=ctr("g"))
        await conn.call("StateChange", ev, nri_pb2.Empty)
        upd = await asyncio.wait_for(conn.updates.get(), 5)
        assert time.monotonic() - t0 < 1.5  # quiet period, not the 2 s bound
        assert cpus_of(upd.update) == {"c-be": "0", "c-bu": "0"}
        # the release is lazy (10 s) and the next allocation takes the CPU again: no update
        ev = nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_CONTAINER, pod=pod("g"),
                                      container=ctr("g"))
        await conn.call("StateChange", ev, nri_pb2.Empty)
        resp = await conn.call("CreateContainer", _guaranteed("g2"),
                               nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "1"
        await asyncio.sleep(2.5)
        assert conn.updates.empty()
        assert plugin.pool_sync is not None and plugin.pool_sync.planner.stale_count() == 0

    run(workdir, body, FAST)


def test_new_shared_container_gets_the_pool_and_stopped_ones_are_left_alone(workdir):  # noqa: F811
    async def body(conn, plugin):
        await conn.handshake(pods=[pod("be", "besteffort"), pod("st", "besteffort")],
                             containers=[ctr("be", 0, "0-1"), ctr("st", 0, "0-1")])
        ev = nri_pb2.StopContainerRequest(pod=pod("st"), container=ctr("st"))
        await conn.call("StopContainer", ev, nri_pb2.StopContainerResponse)
        await conn.call("CreateContainer", _guaranteed("g"), nri_pb2.CreateContainerResponse)
        req = nri_pb2.CreateContainerRequest(pod=pod("new", "besteffort"), container=ctr("new"))
        resp = await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "0"
        upd = await asyncio.wait_for(conn.updates.get(), 5)  # after the 2 s bound
        assert cpus_of(upd.update) == {"c-be": "0"}

    run(workdir, body, FAST)


REPLY = STATIC + "sharedPoolUpdateMode: reply\nsharedPoolGrowDelay: 1s\n"


def test_reply_mode_never_calls_update_containers(workdir):  # noqa: F811
    async def body(conn, plugin):
        await conn.handshake(pods=[pod("be", "besteffort"), pod("bu", "burstable")],
                             containers=[ctr("be", 0, "0-1"), ctr("bu", 0, "0-1")])
        resp = await conn.call("CreateContainer", _guaranteed("g"),
                               nri_pb2.CreateContainerResponse)
        # the allocation's reply moves the shared containers (inside the runtime's call,
        # under its local NRI lock only: no lock-order inversion possible)
        assert resp.adjust.linux.resources.cpu.cpus == "1"
        assert cpus_of(resp.update) == {"c-be": "0", "c-bu": "0"}
        assert all(u.ignore_failure for u in resp.update)
        ev = nri_pb2.StateChangeEvent(event=nri_pb2.POST_START_CONTAINER, pod=pod("g"),
                                      container=ctr("g"))
        await conn.call("StateChange", ev, nri_pb2.Empty)
        ev = nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_CONTAINER, pod=pod("g"),
                                      container=ctr("g"))
        await conn.call("StateChange", ev, nri_pb2.Empty)
        await asyncio.sleep(1.2)  # past the grow delay: the growth waits for a reply
        assert conn.updates.empty()
        req = nri_pb2.StopContainerRequest(pod=pod("bu"), container=ctr("bu"))
        resp = await conn.call("StopContainer", req, nri_pb2.StopContainerResponse)
        assert cpus_of(resp.update) == {"c-be": "0-1"}  # the stopped one is left alone
        resp = await conn.call("StopContainer", req, nri_pb2.StopContainerResponse)
        assert len(resp.update) == 0
        assert conn.updates.empty()

    run(workdir, body, REPLY)


def test_a_reply_modes_updates_stay_in_its_own_answer(workdir, tmp_path):  # noqa: F811
    """The answers that carry only the cpuset share one message per adjustment
    (runtime.plugin._shared_create_answer): a reply-mode answer, which carries the shared
    containers' updates, is a message of its own, and a later answer of the same CPUs in
    async mode carries no update."""
    shared = {}

    def sync(pods):
        return [pod(p, "besteffort") for p in pods], [ctr(p, 0, "0-1") for p in pods]

    async def reply(conn, plugin):
        p, c = sync(["be"])
        await conn.handshake(pods=p, containers=c)
        resp = plugin.create_container(_guaranteed("g"))
        assert resp.adjust.linux.resources.cpu.cpus == "1"
        assert cpus_of(resp.update) == {"c-be": "0"}

    async def asynchronous(conn, plugin):
        p, c = sync(["be2"])
        await conn.handshake(pods=p, containers=c)
        for uid in ("g2", "g3"):  # (the same CPU 1 again once g2 is gone)
            resp = plugin.create_container(_guaranteed(uid))
            shared[uid] = resp
            assert resp.adjust.linux.resources.cpu.cpus == "1" and len(resp.update) == 0
            assert resp.adjust.linux.resources.cpu.quota.value == -1
            ev = nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_CONTAINER, pod=pod(uid),
                                          container=ctr(uid))
            plugin.state_change(ev)

    run(workdir, reply, REPLY)
    run(tmp_path, asynchronous, FAST)
    assert shared["g2"] is shared["g3"]


def test_an_update_before_the_start_is_sent_again_after_it():
    """containerd 2.1 applies an update of a container that is not running to its spec only;
    a StartContainer already under way starts it with the old cpuset (seen with kubelet 1.37
    in the QEMU guest: spec 0-1, cgroup 0-3). So a shared container updated between its
    creation and its start is stale again at its start, and updated once more."""
    p = planner(0)
    p.add("new", ALL, "", 0.0, created=True)
    p.add("old", ALL, "", 0.0)  # an update of a running container: not resent
    p.set_target(SHRUNK, 0.0)
    assert sorted(sum(drain(p, 1.0), [])) == ["new", "old"]
    assert p.stale_count() == 0
    assert p.started("old", 2.0) is False and p.stale_count() == 0
    assert p.started("new", 2.0) is True
    assert p.shared["new"].applied == ALL and p.stale_count() == 1
    assert sum(drain(p, 4.0), []) == ["new"]
    assert p.shared["new"].applied == SHRUNK and p.stale_count() == 0
    assert p.started("new", 5.0) is False  # once


def test_a_container_started_before_any_update_costs_nothing_more():
    p = planner(0)
    p.add("new", SHRUNK, "", 0.0, created=True)
    p.set_target(SHRUNK, 0.0)
    assert p.started("new", 0.5) is False and p.stale_count() == 0
    assert "new" not in p.unstarted
    p.add("gone", ALL, "", 0.0, created=True)
    p.discard("gone")
    assert "gone" not in p.unstarted


def test_unanswered_calls_never_drop_a_container():
    """A call the runtime did not answer in time (done(..., answered=False)) is no sign the
    container is gone: it stays stale and is sent again by every later pass, however many
    timeouts there were (containerd 2.4.2 in a QEMU guest: three 10 s timeouts dropped live
    shared containers, which kept CPUs that had become exclusive)."""
    p = planner(n=1)
    p.set_target(SHRUNK, 0.0)
    for attempt in range(10):
        now = 100.0 * (attempt + 1)
        b, _ = p.plan(now)
        assert b is not None and b.ids == ["s0"]
        assert p.done(b, {"s0"}, now, answered=False) == []
        p.plan(now)  # ends the pass
    assert "s0" in p.shared and p.stale_count() == 1
    b, _ = p.plan(2000.0)
    assert b is not None and b.ids == ["s0"]
    assert p.done(b, set(), 2000.0) == []
    assert p.stale_count() == 0 and p.shared["s0"].applied == SHRUNK


def test_sender_retries_timeouts_until_the_runtime_answers(caplog):
    """SharedPoolSync: four UpdateContainers calls time out (TimeoutError from the transport),
    the fifth is answered; the shared container is updated by it, never given up on."""
    from nri_cpumgr.poolsync import SharedPoolSync

    calls: list[bytes] = []

    async def send(body: bytes) -> set[str]:
        calls.append(body)
        if len(calls) <= 4:
            raise TimeoutError
        return set()

    async def main() -> SharedPoolSync:
        s = SharedPoolSync(shrink_delay=0.01, grow_delay=0.01, quiet=0.0, batch_gap=0.0)
        s.connected(send, ALL, {"s0": (ALL, "")})
        s.set_target(SHRUNK)
        for _ in range(500):
            await asyncio.sleep(0.01)
            if s.planner.stale_count() == 0:
                break
        s.close()
        return s

    with caplog.at_level("WARNING"):
        s = asyncio.run(main())
    assert len(calls) == 5
    assert "s0" in s.planner.shared and s.planner.shared["s0"].applied == SHRUNK
    assert "giving up" not in caplog.text
    assert caplog.text.count("got no answer") == 4


def test_an_unanswered_update_is_sent_again_whatever_the_runtime_said_meanwhile():
    """A call without an answer may still reach the runtime: its UpdateContainer event says
    the new cpuset though the update reached the spec only or was undone (a real kubelet on
    containerd 2.1.9 in the QEMU guest: a 14 s CRI call without an answer, then a besteffort
    container at spec 0-1, cgroup 0-7 for good). The next pass sends it again; a container
    still not started is sent again at its start too."""
    p = planner(0)
    p.add("running", ALL, "", 0.0)
    p.add("new", ALL, "", 0.0, created=True)
    p.set_target(SHRUNK, 0.0)
    b, _ = p.plan(1.0)
    assert b is not None and sorted(b.ids) == ["new", "running"]
    p.add("running", SHRUNK, "", 1.5)  # the runtime's UpdateContainer events, during the call
    p.add("new", SHRUNK, "", 1.5)
    p.done(b, set(b.ids), 15.0, answered=False)
    assert p.shared["running"].applied == ALL and p.shared["new"].applied == ALL
    assert p.stale_count() == 2
    assert drain(p, 15.0) == []  # not in this pass (a slow runtime is not hammered)
    assert sorted(sum(drain(p, 17.0), [])) == ["new", "running"]  # the next pass
    assert p.stale_count() == 0
    assert p.started("new", 18.0) is True  # updated before its start: sent once more
    assert sum(drain(p, 20.0), []) == ["new"]


def test_a_container_started_during_its_update_is_sent_again():
    """A CRI UpdateContainerResources of a container that is starting waits for the start
    (8 s with kubelet 1.37 on containerd 2.1 in the QEMU guest) and may reach its spec only:
    the container started during the call, so the call's end leaves it stale on what it had,
    and the next pass sends it again (seen: spec 0-1, cgroup and /proc 0-3, for good)."""
    p = planner(0)
    p.add("new", ALL, "", 0.0, created=True)
    p.set_target(SHRUNK, 0.0)
    b, _ = p.plan(1.0)
    assert b is not None and b.ids == ["new"] and b.unstarted == {"new": ALL}
    assert p.started("new", 1.5) is False  # during the call: nothing is known yet
    p.add("new", SHRUNK, "", 1.6)  # the runtime's UpdateContainer event, during the call
    p.done(b, set(), 2.0)
    assert p.shared["new"].applied == ALL and p.stale_count() == 1
    assert sum(drain(p, 2.0), []) == ["new"]  # the same pass, once
    assert p.shared["new"].applied == SHRUNK and p.stale_count() == 0


def test_a_burst_of_pod_events_is_planned_once_after_the_loop_read_on(monkeypatch):
    """The events of a pod's create, start, stop and removal (issue 34: a fraction of a
    millisecond apart) cost one re-plan, REPLAN_AFTER after the first, not one right behind
    each reply; a shrink is still sent once due."""
    from nri_cpumgr.poolsync import SharedPoolSync
    from nri_cpumgr.poolsync.planner import PoolPlanner
    from nri_cpumgr.poolsync.sync import REPLAN_AFTER

    sent: list[bytes] = []

    async def send(body: bytes) -> set[str]:
        sent.append(body)
        return set()

    async def main() -> tuple[int, list[bytes]]:
        # (the shrink is due 0.3 s after the last event: the quiet time)
        s = SharedPoolSync(shrink_delay=0.3, grow_delay=0.3, quiet=0.3, batch_gap=0.0)
        s.connected(send, ALL, {"s0": (ALL, "")})
        await asyncio.sleep(REPLAN_AFTER * 5)
        plans: list[float] = []
        real = PoolPlanner.plan
        monkeypatch.setattr(PoolPlanner, "plan",
                            lambda self, now: (plans.append(now), real(self, now))[1])
        s.allocated("g")  # an exclusive container's create
        s.set_target(SHRUNK)
        s.started("g")
        s.add("b", SHRUNK, "", created=True)
        s.started("b")
        assert plans == []  # (nothing re-planned inside the handlers' loop iteration)
        await asyncio.sleep(REPLAN_AFTER * 5)
        burst = len(plans)
        for _ in range(300):
            if sent:
                break
            await asyncio.sleep(0.01)
        s.close()
        return burst, list(sent)

    burst, sent_calls = asyncio.run(main())
    assert burst == 1
    assert len(sent_calls) == 1 and b"s0" in sent_calls[0]
