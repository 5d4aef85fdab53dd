"""The whole plugin in-process: the real Stub and Plugin handlers against the fake runtime
(tests/unit/nri_peer.py), on this host's shape (2 CPUs, CPU 0 reserved)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from nri_cpumgr.api import nri_pb2
from nri_cpumgr.checkpoint import Checkpoint
from nri_cpumgr.config import parse_config
from nri_cpumgr.runtime.plugin import CHECKPOINT_NAME, EVENTS, Plugin
from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine
from tests.unit.nri_peer import nri_container, nri_pod, serve_plugin

from .nri_peer import PeerCallError

MACHINE = Machine(CPUTopology.from_details({0: CPUInfo(0, 0, 0), 1: CPUInfo(0, 0, 1)}))
STATIC = 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'




def pod(uid: str, qos: str = "") -> nri_pb2.PodSandbox:
    return nri_pod(uid, qos)


def ctr(uid: str, cpus_m: int = 0, cpus: str = "", cid: str = "") -> nri_pb2.Container:
    return nri_container(uid, cpus_m, cpus, cid=cid)


def run(workdir: Path, body, config: str = STATIC, **plugin_kw) -> Plugin:
    state = str(workdir / "state")
    cfg = parse_config(config + f"stateDirectory: {state}\n")
    plugin = Plugin(cfg, MACHINE, overrides={"stateDirectory": state}, **plugin_kw)

    return serve_plugin(plugin, workdir, body)


def cpus_of(updates) -> dict[str, str]:
    return {u.container_id: u.linux.resources.cpu.cpus for u in updates}


def test_sync_create_refuse_release(workdir):
    async def body(conn, plugin):
        # the runtime knows a Guaranteed container created while we were away (on 0-1) and a
        # BestEffort one: the Synchronize reply pins the first and shrinks the second
        events, sync = await conn.handshake(
            pods=[pod("g"), pod("be", "besteffort")],
            containers=[ctr("g", 1000, "0-1"), ctr("be", 0, "0-1")],
        )
        assert events == EVENTS
        assert cpus_of(sync.update) == {"c-g": "1", "c-be": "0"}
        assert [u.linux.resources.cpu.quota.value for u in sync.update
                if u.container_id == "c-g"] == [-1]
        # another Guaranteed container is refused with the numbers
        req = nri_pb2.CreateContainerRequest(pod=pod("g2"), container=ctr("g2", 1000))
        with pytest.raises(PeerCallError) as ei:
            await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert ei.value.code == 2
        assert "NotEnoughCPUsError" in ei.value.message
        assert "requested=1, available=0" in ei.value.message
        # a Burstable one joins the shared pool
        req = nri_pb2.CreateContainerRequest(pod=pod("bu", "burstable"), container=ctr("bu", 0))
        resp = await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "0"
        assert not resp.adjust.linux.resources.cpu.HasField("quota")
        # the Guaranteed container is removed: CPU 1 goes back to every shared container,
        # as an unsolicited update after the StateChange reply (sharedPoolGrowDelay 0s)
        ev = nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_CONTAINER, pod=pod("g"),
                                      container=ctr("g"))
        await conn.call("StateChange", ev, nri_pb2.Empty)
        upd = await asyncio.wait_for(conn.updates.get(), 5)
        assert cpus_of(upd.update) == {"c-be": "0-1", "c-bu": "0-1"}
        assert all(u.ignore_failure for u in upd.update)

    plugin = run(workdir, body,
                 STATIC + "sharedPoolGrowDelay: 0s\nsharedPoolUpdateMode: async\n")
    body = Checkpoint(workdir / "state" / CHECKPOINT_NAME).load()
    assert body["policyName"] == "static"
    assert body["defaultCpuSet"] == "0-1"
    assert body["entries"] == {}
    assert plugin.manager.shared_pool() == plugin.policy.reserved_cpus | {1}


def test_checkpoint_written_after_the_reply_and_reloaded(workdir):
    async def body(conn, plugin):
        await conn.handshake()
        req = nri_pb2.CreateContainerRequest(pod=pod("g"), container=ctr("g", 1000))
        resp = await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "1"
        assert resp.adjust.linux.resources.cpu.quota.value == -1
        assert plugin._writer is not None and plugin._writer.flush()

    run(workdir, body)
    saved = json.loads((workdir / "state" / CHECKPOINT_NAME).read_text())["data"]
    assert saved["entries"] == {"g": {"app": "1"}}
    assert saved["defaultCpuSet"] == "0"

    # restart: the checkpoint is loaded, Synchronize confirms the container
    async def again(conn, plugin):
        assert plugin.manager.state.assignments == {"g": {"app": {1}}}
        _, sync = await conn.handshake(pods=[pod("g")], containers=[ctr("g", 1000, "1")])
        assert cpus_of(sync.update) == {}

    run(workdir, again)


def test_corrupt_checkpoint_is_rebuilt_from_synchronize(workdir, caplog):
    state = workdir / "state"
    state.mkdir()
    (state / CHECKPOINT_NAME).write_text('{"version": 1, "data": {"defaultCpuSet": "0"},'
                                         ' "checksum": "bad"}')

    async def body(conn, plugin):
        assert plugin.manager.state.assignments == {}
        _, sync = await conn.handshake(pods=[pod("g")], containers=[ctr("g", 1000, "1")])
        # the running container's exclusive cpuset is adopted
        assert cpus_of(sync.update) == {}
        assert plugin.manager.state.assignments == {"g": {"app": {1}}}

    with caplog.at_level(logging.ERROR):
        run(workdir, body)
    assert "checksum mismatch" in caplog.text
    assert Checkpoint(state / CHECKPOINT_NAME).load()["entries"] == {"g": {"app": "1"}}


def test_launched_plugin_takes_config_from_configure(workdir):
    async def body(conn, plugin):
        # the runtime's config has its own state directory; the command line's wins
        await conn.handshake(config=STATIC + "stateDirectory: /nonexistent/elsewhere\n")
        assert plugin.config.cpuManagerPolicy == "static"
        assert plugin.config.stateDirectory == str(workdir / "state")
        req = nri_pb2.CreateContainerRequest(pod=pod("g"), container=ctr("g", 1000))
        resp = await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "1"

    run(workdir, body, config="", accept_runtime_config=True)


def test_bad_runtime_config_leaves_the_plugin_inert(workdir, caplog, monkeypatch):
    """containerd 1.7 exits when a plugin fails Configure: a refused config answers it, logs
    the refusal (file and key) and the plugin pins nothing and writes no checkpoint."""
    monkeypatch.setenv("NRI_PLUGIN_NAME", "cpumgr")
    monkeypatch.setenv("NRI_PLUGIN_IDX", "90")
    state = workdir / "state"

    async def body(conn, plugin):
        _, sync = await conn.handshake(
            config=STATIC + "reservedSystemCpus: '0'\n", pods=[pod("g")],
            containers=[ctr("g", 1000, "0-1")])
        assert list(sync.update) == []
        assert plugin.refused is not None and "reservedSystemCpus" in plugin.refused
        req = nri_pb2.CreateContainerRequest(pod=pod("h"), container=ctr("h", 1000))
        resp = await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert resp == nri_pb2.CreateContainerResponse()
        ureq = nri_pb2.UpdateContainerRequest(pod=pod("h"), container=ctr("h", 1000))
        uresp = await conn.call("UpdateContainer", ureq, nri_pb2.UpdateContainerResponse)
        assert uresp == nri_pb2.UpdateContainerResponse()
        assert plugin.manager.containers == {}

    with caplog.at_level(logging.ERROR):
        run(workdir, body, config="", accept_runtime_config=True)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, errors
    assert "reservedSystemCpus: unknown key" in errors[0]
    assert "plugin_config_path/90-cpumgr.conf" in errors[0]
    assert "stays inert" in errors[0]
    assert not (state / CHECKPOINT_NAME).exists()


@pytest.mark.parametrize("reserved, words", [
    ("'0-1'\ncpuManagerPolicyOptions: {strict-cpu-reservation: 'true'}",
     "reserve all 2 CPUs under strict-cpu-reservation"),
    ("'0-999'", "CPU(s) 2-999 not on this machine"),
])
def test_runtime_config_reserving_too_much_leaves_the_plugin_inert(workdir, caplog,
                                                                   monkeypatch, reserved,
                                                                   words):
    """The runtime's config gets the start-up config's reserved-CPU checks: every CPU
    reserved under strict-cpu-reservation (or CPUs the machine lacks) is refused with the key
    named, not run with nothing left to allocate."""
    monkeypatch.setenv("NRI_PLUGIN_NAME", "cpumgr")
    monkeypatch.setenv("NRI_PLUGIN_IDX", "90")

    async def body(conn, plugin):
        await conn.handshake(config=f"cpuManagerPolicy: static\nreservedSystemCPUs: "
                                    f"{reserved}\n")
        assert plugin.refused is not None and words in plugin.refused

    with caplog.at_level(logging.ERROR):
        run(workdir, body, config="", accept_runtime_config=True)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and words in errors[0] and "stays inert" in errors[0], errors


def test_runtime_config_refused_by_the_policy_names_its_source(workdir, caplog):
    """An error from the policy builders (after parsing) says where the config came from."""
    async def body(conn, plugin):
        await conn.handshake(config="cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
                                    "cpuManagerPolicyOptions: {full-pcpu-only: 'true'}\n")
        msg = plugin.refused
        assert msg is not None and "cpuManagerPolicyOptions.full-pcpu-only" in msg, msg
        assert msg.endswith("did you mean 'full-pcpus-only'? (from the runtime's Configure)"), msg

    with caplog.at_level(logging.ERROR):
        run(workdir, body, config="", accept_runtime_config=True)
    assert "cpuManagerPolicyOptions.full-pcpu-only" in caplog.text


def test_good_runtime_config_is_handed_on_once_set_up(workdir):
    """The command line starts the metrics server from the runtime's config (on_configured)."""
    seen = []

    async def body(conn, plugin):
        plugin.on_configured = seen.append
        await conn.handshake(config=STATIC + "metricsAddress: 127.0.0.1:0\n")
        assert plugin.refused is None

    run(workdir, body, config="", accept_runtime_config=True)
    assert [c.metricsAddress for c in seen] == ["127.0.0.1:0"]


def test_update_container_keeps_pinning(workdir):
    async def body(conn, plugin):
        await conn.handshake()
        g = ctr("g", 1000)
        await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(pod=pod("g"),
                        container=g), nri_pb2.CreateContainerResponse)
        req = nri_pb2.UpdateContainerRequest(pod=pod("g"), container=g)
        req.linux_resources.cpu.cpus = "0-1"
        req.linux_resources.cpu.quota.value = 100000
        resp = await conn.call("UpdateContainer", req, nri_pb2.UpdateContainerResponse)
        assert cpus_of(resp.update) == {"c-g": "1"}
        assert resp.update[0].linux.resources.cpu.quota.value == -1

    run(workdir, body)


def test_launched_plugin_leaves_the_checkpoint_alone_until_configure(workdir):
    state = workdir / "state"
    Checkpoint(state / CHECKPOINT_NAME).save(
        {"policyName": "static", "defaultCpuSet": "0", "entries": {"g": {"app": "1"}}})

    async def body(conn, plugin):
        # started with defaults (policy none) while the checkpoint says static: provisional
        assert plugin.provisional
        assert Checkpoint(state / CHECKPOINT_NAME).load()["entries"] == {"g": {"app": "1"}}
        await conn.handshake(config=STATIC, pods=[pod("g")], containers=[ctr("g", 1000, "1")])
        assert not plugin.provisional
        assert plugin.manager.state.assignments == {"g": {"app": {1}}}

    run(workdir, body, config="", accept_runtime_config=True)


def test_qos_cross_check_warns_on_contradiction(workdir, caplog):
    async def body(conn, plugin):
        await conn.handshake()
        c = ctr("ab1", 500)  # request 500m ...
        c.linux.resources.cpu.quota.value = 100000  # ... limit 1 CPU, under a Guaranteed parent
        with caplog.at_level(logging.WARNING):
            resp = await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
                pod=pod("ab1"), container=c), nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "0-1"  # shared pool: not an integer
        assert "cgroup parent says Guaranteed but the resources say Burstable" in caplog.text
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            await conn.call("CreateContainer", nri_pb2.CreateContainerRequest(
                pod=pod("g"), container=ctr("g", 1000)), nri_pb2.CreateContainerResponse)
        assert "cgroup parent says Guaranteed" not in caplog.text

    with caplog.at_level(logging.WARNING):
        run(workdir, body)


def test_no_checkpoint_is_written_before_a_runtime_configures_the_plugin(workdir):
    """`run` with no runtime listening used to write cpu_manager_state at once: a later start
    with another policy was then refused because of that stale checkpoint."""
    state = workdir / "state"
    cfg = parse_config(STATIC + f"stateDirectory: {state}\n")
    plugin = Plugin(cfg, MACHINE)
    plugin.close()  # never connected
    assert state.is_dir() and sorted(p.name for p in state.iterdir()) == []
    # another policy starts cleanly afterwards
    Plugin(parse_config(f"stateDirectory: {state}\n"), MACHINE).close()

    async def body(conn, plugin):
        await conn.handshake()
        assert plugin.registered

    run(workdir, body)
    assert Checkpoint(state / CHECKPOINT_NAME).load()["policyName"] == "static"


def test_pod_operations_mark_the_node_busy_for_the_cri_pass(workdir):
    """The answer to a pod operation (create, stop, a state change) touches the node's
    activity, which a cri pass's calls wait on (nri_cpumgr.poolsync.activity); the
    UpdateContainer that each of the pass's own calls causes does not (or a pass would
    hold itself up)."""
    async def body(conn, plugin):
        await conn.handshake()
        act = plugin.pod_activity
        g = ctr("g", 1000)
        seen = []
        for method, req, resp in (
            ("CreateContainer", nri_pb2.CreateContainerRequest(pod=pod("g"), container=g),
             nri_pb2.CreateContainerResponse),
            ("UpdateContainer", nri_pb2.UpdateContainerRequest(pod=pod("g"), container=g),
             nri_pb2.UpdateContainerResponse),
            ("StopContainer", nri_pb2.StopContainerRequest(pod=pod("g"), container=g),
             nri_pb2.StopContainerResponse),
            ("StateChange", nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_CONTAINER,
                                                     pod=pod("g"), container=g),
             nri_pb2.Empty),
        ):
            act.last = float("-inf")
            await conn.call(method, req, resp)
            seen.append((method, act.last > float("-inf")))
        assert seen == [("CreateContainer", True), ("UpdateContainer", False),
                        ("StopContainer", True), ("StateChange", True)]

    run(workdir, body)


def test_create_leaves_its_bookkeeping_for_after_the_answer(workdir):
    """Behind a transport that calls it (defer_after_reply), a create's counters and shared
    pool re-plan wait for after its answer; an answer that was never written has them done
    before the next handler. Without such a transport they are done before the return."""
    def plugin(sub: str) -> Plugin:
        p = Plugin(parse_config(STATIC + f"stateDirectory: {workdir / sub}\n"), MACHINE)
        p.configure(nri_pb2.ConfigureRequest(runtime_name="containerd", runtime_version="v2.4.2"))
        p.synchronize([], [])
        return p

    pinned = "cpu_manager_pinning_requests_total"
    direct = plugin("direct")
    direct.create_container(nri_pb2.CreateContainerRequest(pod=pod("g"), container=ctr("g", 1000)))
    assert direct.metrics.value(pinned) == 1
    assert direct.pool_sync is not None and direct.pool_sync.planner.target == {0}

    p = plugin("deferred")
    after = p.defer_after_reply()
    req = nri_pb2.CreateContainerRequest(pod=pod("g"), container=ctr("g", 1000))
    resp = p.create_container(req)
    assert resp.adjust.linux.resources.cpu.cpus == "1"
    assert p.metrics.value(pinned) == 0
    assert p.pool_sync is not None and p.pool_sync.planner.target != {0}
    after()
    assert p.metrics.value(pinned) == 1 and p.pool_sync.planner.target == {0}
    after()  # (once only)
    assert p.metrics.value(pinned) == 1
    # an answer that could not be written: its work is done before the next request's
    p.create_container(nri_pb2.CreateContainerRequest(pod=pod("b", "burstable"),
                                                      container=ctr("b")))
    assert p.metrics.value(pinned) == 1
    p.stop_container(nri_pb2.StopContainerRequest(pod=pod("b", "burstable"), container=ctr("b")))
    assert p.metrics.value("nri_cpumgr_nri_request_duration_seconds_count",
                           {"method": "CreateContainer"}) == 2


def test_the_next_take_is_prepared_after_each_answer(workdir, monkeypatch):
    """After an answer (the function defer_after_reply gives the transport), the static
    policy prepares the take of the last size asked for, for the CPUs free then (issue 34):
    the next create of that size answers with those CPUs without a take of its own. A
    release the preparation did not see leaves the create to take for itself."""
    from nri_cpumgr.cm.cpumanager import policy_static

    machine = Machine(CPUTopology.from_details({c: CPUInfo(0, 0, c) for c in range(4)}))
    p = Plugin(parse_config(STATIC + f"stateDirectory: {workdir}\n"), machine)
    p.configure(nri_pb2.ConfigureRequest(runtime_name="containerd", runtime_version="v2.4.2"))
    p.synchronize([], [])
    after = p.defer_after_reply()

    def create(uid: str) -> str:
        req = nri_pb2.CreateContainerRequest(pod=pod(uid), container=ctr(uid, 1000))
        return p.create_container(req).adjust.linux.resources.cpu.cpus

    collected: list[bool] = []
    from nri_cpumgr.runtime import plugin as plugin_mod

    monkeypatch.setattr(plugin_mod, "collect_early", lambda: collected.append(True))
    assert create("g1") == "1"
    after()
    assert collected == [True]  # (and a nearly due collection after each answer)
    takes: list[int] = []
    real = policy_static.take_by_topology_mask

    def counted(topo, available, count, *rest):  # noqa: ANN001, ANN202
        takes.append(available)
        return real(topo, available, count, *rest)

    monkeypatch.setattr(policy_static, "take_by_topology_mask", counted)
    assert create("g2") == "2"
    assert takes == []  # (prepared after g1's answer, for CPUs 2-3)
    after()
    assert takes == [0b1000]  # (prepared for CPU 3, the one left)
    p.state_change(nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_CONTAINER, pod=pod("g1"),
                                            container=ctr("g1")))
    assert create("g3") == "1"  # (CPUs 1 and 3 free: not what was prepared)
    assert takes == [0b1000, 0b1010]


def test_a_nearly_due_collection_runs_after_the_answer(monkeypatch):
    """collect_early (run by after_reply, before the next request is read): a collection
    of the young generation once 3/4 of the collector's first threshold of new objects is
    reached, of the two young ones when the second is due too, none below that or while
    the collector is off."""
    import gc

    from nri_cpumgr.runtime import plugin as plugin_mod

    runs: list[int] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            runs.append(info["generation"])

    counts = [0, 0, 0]
    monkeypatch.setattr(gc, "get_threshold", lambda: (100, 10, 10))
    monkeypatch.setattr(gc, "get_count", lambda: tuple(counts))
    gc.callbacks.append(seen)
    was_on = gc.isenabled()
    try:
        gc.enable()
        counts[:] = [74, 9, 0]
        plugin_mod.collect_early()
        assert runs == []
        counts[:] = [75, 9, 0]
        plugin_mod.collect_early()
        assert runs == [0]
        counts[:] = [99, 10, 3]
        plugin_mod.collect_early()
        assert runs == [0, 1]
        gc.disable()
        plugin_mod.collect_early()
        assert runs == [0, 1]
    finally:
        gc.callbacks.remove(seen)
        if was_on:
            gc.enable()


def test_after_reply_work_that_fails_is_logged_and_the_rest_runs(workdir, caplog):
    p = Plugin(parse_config(STATIC + f"stateDirectory: {workdir}\n"), MACHINE)
    after = p.defer_after_reply()
    done: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    p._defer(boom)
    p._defer(lambda: done.append("next"))
    with caplog.at_level(logging.ERROR, logger="nri_cpumgr"):
        after()
    assert done == ["next"]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "work left for after an answer failed"]
    assert "RuntimeError: boom" in caplog.text
