"""Kill -9 at any moment (issue 21 item 3): nri-cpumgr SIGKILLed at random times while pods
churn (tests/e2e/stress.py's churn: a Guaranteed 1-CPU pod in a loop, two clients churning
BestEffort pods), sometimes again right after its relaunch (during its registration or
Synchronize), with containers created while it is down. After each round the churn stops and:

1. the plugin is killed, a Guaranteed pod is created and started while it is down (the
   runtime creates it without the plugin: on every CPU), the plugin is relaunched;
2. within ``SETTLE`` seconds of the relaunch every running container's cpuset is right: the
   Guaranteed container alone on CPU 1 with no CFS quota, every shared container on exactly
   the shared pool (CPU 0), and the checkpoint assigns CPU 1 to that pod alone.

No CRI call may fail or outlive its deadline in between (a lost release or a double
assignment shows as NotEnoughCPUsError on the next Guaranteed pod). This machine has 2 CPUs;
``reservedSystemCPUs: "0"`` leaves CPU 1 as the only exclusive CPU. ``NRI_E2E_KILL_ROUNDS``
sets the rounds (default 5); the seed is printed (``NRI_E2E_KILL_SEED`` replays its choices).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

from nri_cpumgr.cpuset import CPUSet
from nri_cpumgr.runtime.plugin import CHECKPOINT_NAME
from tests.e2e.harness import Containerd, CRIClient, PluginProcess
from tests.e2e.plugin_run import PLUGIN_INDEX, PLUGIN_NAME, write_config
from tests.e2e.stress import G1, Churn

ROUNDS = int(os.environ.get("NRI_E2E_KILL_ROUNDS", "5"))
SHARED = 6
SETTLE = 5.0  # s: "within seconds" of the relaunch
ALL = CPUSet({0, 1})


class Relauncher:
    """The plugin as a node's DaemonSet restarts it: same config, state directory and log."""

    def __init__(self, c: Containerd, workdir: Path) -> None:
        self.c = c
        cfg = write_config(workdir, c, sharedPoolShrinkDelay="100ms", sharedPoolGrowDelay="0s")
        self.argv = [sys.executable, "-m", "nri_cpumgr", "run", "--config", str(cfg)]
        self.log = workdir / "plugin.log"
        self.state = workdir / "state" / CHECKPOINT_NAME
        self.p: PluginProcess | None = None
        self.kills = 0
        self.unsynced_kills = 0  # instances killed before containerd had them synchronized
        self.synced = False

    def launch(self, wait: bool = True) -> float:
        """Start it; with ``wait``, until containerd has it synchronized (seconds taken)."""
        t0 = time.monotonic()
        since_c = self.c.log_offset()
        since_p = self.log.stat().st_size if self.log.exists() else 0
        self.p = PluginProcess(self.argv, self.log).start()
        self.synced = False
        if wait:
            # a killed instance's "failed to synchronize plugin: ttrpc: closed" may come late
            self.c.wait_plugin_ready(PLUGIN_NAME, PLUGIN_INDEX, timeout=20, since=since_c,
                                     stale_failures=self.unsynced_kills)
            self.p.wait_for_log(r"synchronize pods=", timeout=20, since=since_p)
            self.unsynced_kills = 0
            self.synced = True
        return time.monotonic() - t0

    def kill(self) -> None:
        if self.p is not None and self.p.running:
            self.p.kill(signal.SIGKILL)
            self.p.wait(10)
            self.kills += 1
            if not self.synced:
                self.unsynced_kills += 1

    def stop(self) -> None:
        if self.p is not None:
            self.p.stop()


def _running(cri: CRIClient) -> dict[str, str]:
    """Running container id -> its pod's name."""
    pods = {p.id: p.metadata.name for p in cri.list_pods()}
    return {c.id: pods.get(c.pod_sandbox_id, "?") for c in cri.list_containers()
            if c.state == cri.pb.CONTAINER_RUNNING}


def _wrong(cri: CRIClient, g_cid: str, g_uid: str, state: Path) -> list[str]:
    """What is not right yet (empty: every cpuset and the checkpoint are right)."""
    bad = []
    for cid, pod in _running(cri).items():
        try:
            cpus = CPUSet.parse(cri.cgroup_cpus(cid))
            quota = cri.cgroup_cfs_quota(cid)
        except Exception as e:  # noqa: BLE001 - gone meanwhile: nothing to check
            bad.append(f"{pod}: unreadable ({e})")
            continue
        if cid == g_cid:
            if cpus != CPUSet({1}) or quota != -1:
                bad.append(f"{pod} (Guaranteed): cpus {cpus} quota {quota}")
        elif cpus != CPUSet({0}):
            bad.append(f"{pod} (shared): cpus {cpus}")
    try:
        body = json.loads(state.read_text())["data"]
    except (OSError, ValueError, KeyError) as e:
        return [*bad, f"checkpoint: {e}"]
    entries = body.get("entries", {})
    if entries != {g_uid: {"c": "1"}}:
        bad.append(f"checkpoint entries {entries} (want {{{g_uid!r}: {{'c': '1'}}}})")
    return bad


def test_plugin_sigkilled_during_churn_recovers_every_cpuset(containerd_version,
                                                              make_containerd, e2e_workdir):
    seed = int(os.environ.get("NRI_E2E_KILL_SEED", str(time.time_ns() % 10**6)))
    print(f"seed {seed}")
    rng = random.Random(seed)
    c = make_containerd(containerd_version)
    plugin = Relauncher(c, e2e_workdir)
    plugin.launch()
    cri = c.cri_client(timeout=20)
    churns: list[Churn] = []
    g_pod = ""
    settled: list[float] = []
    relaunch: list[float] = []  # s from the launch until containerd had it synchronized
    try:
        for i in range(SHARED):
            cri.start_container(cri.create_container(cri.run_pod(f"shared-{i}", "BestEffort"),
                                                     "c"))
        for r in range(ROUNDS):
            if g_pod:  # the last round's Guaranteed pod leaves: CPU 1 for the churn
                cri.stop_pod(g_pod)
                cri.remove_pod(g_pod)
            churn = Churn(c, deadline=20.0, max_cycles=10**6)
            churns.append(churn)
            threads = [threading.Thread(target=churn.loop, args=("guaranteed", "Guaranteed"),
                                        daemon=True)]
            threads += [threading.Thread(target=churn.loop, args=(f"besteffort{i}",
                                                                  "BestEffort"), daemon=True)
                        for i in range(2)]
            for t in threads:
                t.start()
            end = time.monotonic() + rng.uniform(3.0, 6.0)
            while time.monotonic() < end and not churn.stop.is_set():
                time.sleep(rng.uniform(0.1, 1.5))
                plugin.kill()
                time.sleep(rng.uniform(0.0, 1.5))  # the churn creates containers meanwhile
                if rng.random() < 0.4:  # killed again while registering / synchronizing
                    plugin.launch(wait=False)
                    time.sleep(rng.uniform(0.0, 0.4))
                    plugin.kill()
                plugin.launch()
            churn.stop.set()
            for t in threads:
                t.join(45)
            assert not any(t.is_alive() for t in threads), f"round {r}: churn stuck"
            assert churn.hang is None, f"round {r}: {churn.hang}"
            assert not churn.errors, f"round {r}: {churn.errors}"
            # a Guaranteed pod created and started while the plugin is down
            plugin.kill()
            g_pod = cri.run_pod(f"g-down-{r}", "Guaranteed")
            g_cid = cri.create_container(g_pod, "c", requests=G1, limits=G1)
            cri.start_container(g_cid)
            assert CPUSet.parse(cri.cgroup_cpus(g_cid)) == ALL  # nobody pinned it
            g_uid = cri.pods[g_pod].metadata.uid
            relaunch.append(plugin.launch())
            t0 = time.monotonic()
            while (bad := _wrong(cri, g_cid, g_uid, plugin.state)) and \
                    time.monotonic() - t0 < SETTLE:
                time.sleep(0.05)
            assert not bad, (f"round {r}, {SETTLE} s after the relaunch: {bad}\nplugin log:\n"
                             + plugin.log.read_text(errors="replace")[-6000:])
            settled.append(time.monotonic() - t0)
            assert plugin.p is not None and plugin.p.running
        cycles = sum(sum(ch.cycles.values()) for ch in churns)
        print(f"containerd {containerd_version}: {ROUNDS} rounds, {plugin.kills} SIGKILLs, "
              f"{cycles} pod cycles; relaunch to synchronized at worst {max(relaunch):.2f} s, "
              f"every cpuset and the checkpoint right {max(settled):.2f} s after that")
        assert cycles >= ROUNDS  # the churn churned
    finally:
        plugin.stop()
        for ch in churns:
            ch.stop.set()
            for client in ch.clients:
                client.cleanup()
                client.close()
        cri.cleanup()
        cri.close()
