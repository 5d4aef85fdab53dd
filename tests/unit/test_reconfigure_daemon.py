"""The daemon's config change at runtime (nri_cpumgr.runtime.reconfig): the real Stub and
Plugin against the fake runtime (tests/unit/nri_peer.py) on a 4-CPU machine, shared-pool
update mode ``async`` (the fake runtime has no CRI socket): apply, invalid config, rollback,
and a plugin killed in the middle of a plan that completes it after its relaunch."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from nri_cpumgr.checkpoint import Checkpoint
from nri_cpumgr.config import parse_config
from nri_cpumgr.runtime.plugin import (
    CHECKPOINT_NAME,
    RECONFIGURATION_PLAN_NAME,
    Plugin,
)
from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine
from tests.unit.nri_peer import nri_container, nri_pod, serve_plugin

MACHINE = Machine(CPUTopology.from_details({c: CPUInfo(0, 0, c) for c in range(4)}))
OLD = 'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\nsharedPoolUpdateMode: async\n'
NEW = 'cpuManagerPolicy: static\nreservedSystemCPUs: "0-1"\nsharedPoolUpdateMode: async\n'
# g1 on CPU 1, g2 on CPU 2, the BestEffort container on the shared pool 0,3
PODS = [nri_pod("g1"), nri_pod("g2"), nri_pod("be", "besteffort")]
CONTAINERS = [nri_container("g1", 1000, "1"), nri_container("g2", 1000, "2"),
              nri_container("be", 0, "0,3")]


def cfg(workdir: Path, text: str):
    return parse_config(text + f"stateDirectory: {workdir / 'state'}\n")


def run(workdir: Path, body, config: str = OLD) -> Plugin:
    c = cfg(workdir, config)
    plugin = Plugin(c, MACHINE, overrides={"stateDirectory": c.stateDirectory})

    return serve_plugin(plugin, workdir, body)


async def settled(conn) -> None:
    """The handshake with the node's pods and containers, its updates received and dropped."""
    await conn.handshake(pods=PODS, containers=CONTAINERS)
    await asyncio.sleep(0.05)
    await drain(conn)


async def drain(conn) -> list[dict[str, str]]:
    """The UpdateContainers calls received so far, each as {container id: cpus}."""
    out = []
    while not conn.updates.empty():
        u = conn.updates.get_nowait()
        out.append({x.container_id: x.linux.resources.cpu.cpus for x in u.update})
    return out


def test_reserved_grown_moves_only_the_container_on_the_new_reserved_cpu(workdir, caplog):
    async def body(conn, plugin):
        _, sync = await conn.handshake(pods=PODS, containers=CONTAINERS)
        assert {u.container_id: u.linux.resources.cpu.cpus for u in sync.update} == {}
        await asyncio.sleep(0.05)
        await drain(conn)
        with caplog.at_level(logging.INFO):
            result = await plugin.reconfigure(cfg(workdir, NEW), "test")
        assert result == "applied"
        calls = await drain(conn)
        # the shared container shrinks onto what both pools have (0), g1 moves to 3, the
        # shared container takes the new pool (0-1); g2 is never touched
        assert calls == [{"c-be": "0"}, {"c-g1": "3"}, {"c-be": "0-1"}]
        assert plugin.config.reservedSystemCPUs == "0-1"
        assert plugin.manager.state.assignments == {"g1": {"app": {3}}, "g2": {"app": {2}}}
        assert plugin.metrics.value("nri_cpumgr_reconfigurations_total",
                                    {"result": "applied"}) == 1
        # the checkpoint is the new state, the recorded plan is gone
        saved = Checkpoint(workdir / "state" / CHECKPOINT_NAME).load()
        assert saved["reservedCpuSet"] == "0-1" and saved["defaultCpuSet"] == "0-1"
        assert not (workdir / "state" / RECONFIGURATION_PLAN_NAME).exists()
        # the same config again: nothing to do
        assert await plugin.reconfigure(cfg(workdir, NEW), "test") == "unchanged"

    run(workdir, body)
    assert "CPU(s) 1 became reserved" in caplog.text
    assert "event type=Normal reason=Reconfigured" in caplog.text


def test_invalid_config_keeps_the_running_one(workdir, caplog):
    async def body(conn, plugin):
        await settled(conn)
        before = Checkpoint(workdir / "state" / CHECKPOINT_NAME).load()
        bad = cfg(workdir, 'cpuManagerPolicy: static\nreservedSystemCPUs: "0-9"\n')
        with caplog.at_level(logging.ERROR):
            assert await plugin.reconfigure(bad, "test") == "invalid"
        assert await drain(conn) == []
        assert plugin.config.reservedSystemCPUs == "0"
        assert Checkpoint(workdir / "state" / CHECKPOINT_NAME).load() == before
        assert plugin.metrics.value("nri_cpumgr_reconfigurations_total",
                                    {"result": "invalid"}) == 1
        # still serving
        from nri_cpumgr.api import nri_pb2

        req = nri_pb2.CreateContainerRequest(pod=nri_pod("b2", "burstable"),
                                             container=nri_container("b2", 0))
        resp = await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "0,3"

    run(workdir, body)
    assert "reservedSystemCPUs '0-9': CPU(s) 4-9 not on this machine" in caplog.text
    assert "keeping the running config" in caplog.text


def test_a_refused_update_rolls_back_to_the_old_config(workdir, caplog):
    async def body(conn, plugin):
        await settled(conn)
        conn.fail_updates = {"c-g1"}
        with caplog.at_level(logging.INFO):
            assert await plugin.reconfigure(cfg(workdir, NEW), "test") == "rolled-back"
        assert plugin.config.reservedSystemCPUs == "0"
        # g1's failed move left it where it was: the old config keeps it on CPU 1
        assert plugin.manager.state.assignments == {"g1": {"app": {1}}, "g2": {"app": {2}}}
        assert plugin.manager.shared_pool() == {0, 3}
        saved = Checkpoint(workdir / "state" / CHECKPOINT_NAME).load()
        assert saved["reservedCpuSet"] == "0"
        assert not (workdir / "state" / RECONFIGURATION_PLAN_NAME).exists()
        assert plugin.metrics.value("nri_cpumgr_reconfigurations_total",
                                    {"result": "rolled-back"}) == 1
        calls = await drain(conn)
        assert calls[-1] == {"c-be": "0,3"}  # the shared container is back on the old pool

    run(workdir, body)
    assert "rolling back to the previous config" in caplog.text
    assert "event type=Warning reason=ReconfigurationRolledBack" in caplog.text


def test_killed_mid_plan_the_relaunch_completes_it(workdir, caplog):
    async def first(conn, plugin):
        await settled(conn)

        async def hang(payload: bytes) -> set[str]:
            await asyncio.sleep(3600)
            return set()

        plugin.sender = hang  # the first update never ends: the plugin dies there
        task = asyncio.create_task(plugin.reconfigure(cfg(workdir, NEW), "test"))
        await asyncio.sleep(0.2)
        assert (workdir / "state" / RECONFIGURATION_PLAN_NAME).exists()
        task.cancel()

    run(workdir, first)
    # recorded before the first move: the checkpoint already holds the new state
    assert Checkpoint(workdir / "state" / CHECKPOINT_NAME).load()["reservedCpuSet"] == "0-1"

    async def again(conn, plugin):
        assert plugin.resume is not None and plugin.resume.direction == "forward"
        # the runtime still shows the old cpusets (no move was made)
        _, sync = await conn.handshake(pods=PODS, containers=CONTAINERS)
        assert list(sync.update) == []  # the updates go after the reply, not in it
        calls = []
        for _ in range(20):
            await asyncio.sleep(0.05)
            calls += await drain(conn)
            if not (workdir / "state" / RECONFIGURATION_PLAN_NAME).exists():
                break
        merged = {k: v for c in calls for k, v in c.items()}
        assert merged["c-g1"] == "3" and merged["c-be"] == "0-1" and "c-g2" not in merged
        assert not (workdir / "state" / RECONFIGURATION_PLAN_NAME).exists()
        assert plugin.metrics.value("nri_cpumgr_reconfigurations_total",
                                    {"result": "resumed"}) == 1

    with caplog.at_level(logging.INFO):
        run(workdir, again, config=NEW)
    assert "interrupted reconfiguration completed" in caplog.text


def test_killed_mid_plan_with_the_old_config_back_restores_the_old_state(workdir):
    async def first(conn, plugin):
        await conn.handshake(pods=PODS, containers=CONTAINERS)
        await asyncio.sleep(0.05)

        async def hang(payload: bytes) -> set[str]:
            await asyncio.sleep(3600)
            return set()

        plugin.sender = hang
        task = asyncio.create_task(plugin.reconfigure(cfg(workdir, NEW), "test"))
        await asyncio.sleep(0.2)
        task.cancel()

    run(workdir, first)

    async def again(conn, plugin):
        assert plugin.resume is not None and plugin.resume.direction == "back"
        assert plugin.manager.state.assignments == {"g1": {"app": {1}}, "g2": {"app": {2}}}
        await conn.handshake(pods=PODS, containers=CONTAINERS)
        for _ in range(20):
            await asyncio.sleep(0.05)
            if not (workdir / "state" / RECONFIGURATION_PLAN_NAME).exists():
                break
        assert not (workdir / "state" / RECONFIGURATION_PLAN_NAME).exists()

    run(workdir, again, config=OLD)


def test_the_config_file_watch_and_sighup_reload(tmp_path, caplog):
    """nri-cpumgr run's reloader: a change of the file (a ConfigMap swaps a symlink) or a
    SIGHUP hands the new config to the plugin; an invalid file is an ERROR, nothing else."""
    import os
    import signal

    from nri_cpumgr.cli import _Reloader
    from nri_cpumgr.metrics import Metrics

    class Fake:
        def __init__(self) -> None:
            self.metrics = Metrics()
            self.got: list[tuple[str, str]] = []

        async def reconfigure(self, config, source):
            self.got.append((config.reservedSystemCPUs, source))
            return "applied"

    f = tmp_path / "config.yaml"
    f.write_text(OLD)
    plugin = Fake()
    r = _Reloader(str(f), {"stateDirectory": str(tmp_path)}, {"plugin": plugin})

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, r.soon, "SIGHUP")
        watch = loop.create_task(r.watch(0.02))
        try:
            new = tmp_path / "new.yaml"
            new.write_text(NEW)
            os.replace(new, f)  # the symlink swap's effect: another file at the path
            for _ in range(50):
                await asyncio.sleep(0.02)
                if plugin.got:
                    break
            assert plugin.got == [("0-1", f"a change of the config file ({f})")]
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(50):
                await asyncio.sleep(0.02)
                if len(plugin.got) == 2:
                    break
            assert plugin.got[1] == ("0-1", f"SIGHUP ({f})")
            with caplog.at_level(logging.WARNING):
                bad = tmp_path / "bad.yaml"
                bad.write_text("cpuManagerPolicy: statik\n")
                os.replace(bad, f)
                await asyncio.sleep(0.2)
            assert len(plugin.got) == 2
            assert plugin.metrics.value("nri_cpumgr_reconfigurations_total",
                                        {"result": "invalid"}) == 1
        finally:
            watch.cancel()
            loop.remove_signal_handler(signal.SIGHUP)

    asyncio.run(main())
    assert "cpuManagerPolicy" in caplog.text and "keeping the running config" in caplog.text
    # an unreadable file is an event too, as a refused plan is (a user watches events)
    assert "event type=Warning reason=ReconfigurationInvalid" in caplog.text


def test_reply_mode_has_no_update_path_and_keeps_the_config(workdir, caplog):
    async def body(conn, plugin):
        await conn.handshake(pods=PODS, containers=CONTAINERS)
        with caplog.at_level(logging.WARNING):
            new = cfg(workdir, NEW.replace("async", "reply"))
            assert await plugin.reconfigure(new, "test") == "refused"
        assert plugin.config.reservedSystemCPUs == "0"
        assert not (workdir / "state" / RECONFIGURATION_PLAN_NAME).exists()

    run(workdir, body, config=OLD.replace("async", "reply"))
    assert "needs the cri or async path" in caplog.text
    assert "event type=Warning reason=ReconfigurationRefused" in caplog.text


def test_a_plan_that_cannot_be_recorded_is_refused_with_an_event(workdir, caplog):
    async def body(conn, plugin):
        await settled(conn)
        from nri_cpumgr.runtime import reconfig

        def no_room(*a, **k):
            raise OSError(28, "No space left on device")

        orig, reconfig.record = reconfig.record, no_room
        try:
            with caplog.at_level(logging.WARNING):
                assert await plugin.reconfigure(cfg(workdir, NEW), "test") == "refused"
        finally:
            reconfig.record = orig
        assert plugin.config.reservedSystemCPUs == "0"
        assert await drain(conn) == []

    run(workdir, body)
    assert "cannot record the plan" in caplog.text and "No space left" in caplog.text
    assert "event type=Warning reason=ReconfigurationRefused" in caplog.text
