#!/usr/bin/env python3
"""The allocator at the largest machines users run (issue 34): the ``large-768`` sysfs fixture
(768 CPUs, 16 NUMA nodes, 64 L3 caches, SMT 2; scripts/make_sysfs_fixtures.py writes it into a
temporary directory, ~20 s the first time), read by the plugin's own topology reader, with
1,000 running containers.

The plugin's handlers are called in process (no transport), with ``take_by_topology`` (the
CPU take, kubelet cpu_assignment.go) and the Topology Manager's ``merge`` (policy.go) timed
where the plugin calls them; per operation, median and p99 in ms:

* ``Synchronize``: 1,000 containers (900 Burstable shared, 100 Guaranteed of 1-8 CPUs already
  pinned), a fresh plugin each round;
* ``CreateContainer``: Guaranteed containers of 1, 2, 4, 8, 16, 48 CPUs (48: a whole NUMA
  node) created on that node with ``topologyManagerPolicy: best-effort`` and
  ``memoryManagerPolicy: Static``, each removed again after 200 others (the free CPUs stay
  fragmented); and ``take`` and ``merge`` inside them;
* ``pod-level pod``: with pod-level resource managers (``topologyManagerScope: pod``), pods
  with an 8-CPU budget, one 4-CPU container and a shared sidecar, created and removed.

Figures only: nothing is asserted (targets in docs/performance.md: take and merge p99 <= 1 ms).

    .venv/bin/python benchmarks/large_machine.py [--creates 600] [--syncs 5]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

from nri_cpumgr.api import nri_pb2  # noqa: E402
from nri_cpumgr.cm.cpumanager import policy_static  # noqa: E402
from nri_cpumgr.cm.podresources import manager as pod_manager  # noqa: E402
from nri_cpumgr.cm.topologymanager import policy as tm_policy  # noqa: E402
from nri_cpumgr.config import parse_config  # noqa: E402
from nri_cpumgr.runtime.plugin import Plugin  # noqa: E402
from nri_cpumgr.sysfs import discover  # noqa: E402
from scripts.make_sysfs_fixtures import large_768, write_machine  # noqa: E402
from tests.unit.nri_peer import nri_container, nri_pod  # noqa: E402

BASE = ('cpuManagerPolicy: static\nreservedSystemCPUs: "0,384"\n'
        "topologyManagerPolicy: best-effort\n"
        "topologyManagerPolicyOptions: {max-allowable-numa-nodes: \"16\"}\n")
MEMORY_STATIC = ("memoryManagerPolicy: Static\n"
                 "reservedMemory: [{numaNode: 0, limits: {memory: 1124Mi}}]\n"
                 "kubeReserved: {memory: 1Gi}\n")
POD_LEVEL = ("topologyManagerScope: pod\n"
             "featureGates: {PodLevelResources: true, PodLevelResourceManagers: true}\n")
SIZES = (1, 2, 4, 8, 16, 48)
GiB = 1 << 30

TIMES: dict[str, list[float]] = {"take": [], "merge": []}
#: The same operations' CPU time (this thread's, time.thread_time): on a loaded machine the
#: wall figures are mostly waiting for a CPU.
CPU_TIMES: dict[str, list[float]] = {"take": [], "merge": []}


def timed(name: str, fn: Callable) -> Callable:  # type: ignore[type-arg]
    def wrapper(*a, **k):  # type: ignore[no-untyped-def]
        c = time.thread_time()
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            TIMES[name].append((time.perf_counter() - t) * 1e3)
            CPU_TIMES[name].append((time.thread_time() - c) * 1e3)
    return wrapper


def instrument() -> None:
    """Time the take and the merge where the plugin calls them."""
    policy_static.take_by_topology = timed("take", policy_static.take_by_topology)
    pod_manager.take_by_topology = timed("take", pod_manager.take_by_topology)
    for cls in (tm_policy.BestEffortPolicy, tm_policy.SingleNumaNodePolicy):
        cls.merge = timed("merge", cls.merge)  # type: ignore[method-assign]


def guaranteed(uid: str, cpus: int, cpuset: str = "") -> tuple[nri_pb2.PodSandbox,
                                                                nri_pb2.Container]:
    return nri_pod(uid), nri_container(uid, cpus * 1000, cpuset, memory=cpus * GiB // 4)


def sync_objects() -> tuple[list[nri_pb2.PodSandbox], list[nri_pb2.Container]]:
    """100 Guaranteed containers pinned to 1-8 CPUs of their own from CPU 1 upwards, 900
    Burstable ones on the rest (the runtime's view of a node the plugin ran before)."""
    pods, ctrs = [], []
    cpu = 1
    for i in range(100):
        n = (1, 2, 4, 8)[i % 4]
        p, c = guaranteed(f"g{i}", n, f"{cpu}-{cpu + n - 1}" if n > 1 else str(cpu))
        cpu += n
        pods.append(p)
        ctrs.append(c)
    for i in range(900):
        pods.append(nri_pod(f"b{i}", "burstable"))
        ctrs.append(nri_container(f"b{i}", 250, f"{cpu}-767"))
    return pods, ctrs


def q(v: list[float]) -> str:
    if not v:
        return "-"
    s = sorted(v)
    return (f"median {statistics.median(s):8.3f}  p99 {s[min(len(s) - 1, int(len(s) * 0.99))]:8.3f}"
            f"  max {s[-1]:8.3f}  (n={len(s)})")


async def run(args: argparse.Namespace, root: Path, work: Path) -> None:
    machine = discover(str(root))

    async def sender(payload: bytes) -> set[str]:
        return set()

    def new_plugin(extra: str, name: str) -> Plugin:
        state = work / name
        shutil.rmtree(state, ignore_errors=True)
        cfg = parse_config(BASE + (MEMORY_STATIC if args.memory_static else "") + extra
                           + f"stateDirectory: {state}\nkubeletStateDirectory: ''\n")
        plugin = Plugin(cfg, machine, sysfs_root=str(root))
        plugin.sender = sender
        plugin.configure(nri_pb2.ConfigureRequest(runtime_name="bench", runtime_version="0"))
        return plugin

    async def settle() -> None:
        for _ in range(3):
            await asyncio.sleep(0)

    pods, ctrs = sync_objects()
    syncs: list[float] = []
    for r in range(args.syncs):
        plugin = new_plugin("", f"sync{r}")
        t = time.perf_counter()
        plugin.synchronize(pods, ctrs)
        syncs.append((time.perf_counter() - t) * 1e3)
        await settle()
        if r < args.syncs - 1:
            plugin.close()
    for d in (TIMES, CPU_TIMES):
        d["take"].clear()
        d["merge"].clear()

    creates: list[float] = []
    live: list[tuple[nri_pb2.PodSandbox, nri_pb2.Container]] = []
    refused = 0
    for i in range(args.creates):
        p, c = guaranteed(f"n{i}", SIZES[i % len(SIZES)])
        t = time.perf_counter()
        n0 = len(TIMES["merge"])
        try:
            plugin.create_container(nri_pb2.CreateContainerRequest(pod=p, container=c))
            live.append((p, c))
        except Exception:  # noqa: BLE001 - the machine is full: counted
            refused += 1
        creates.append((time.perf_counter() - t) * 1e3)
        if args.verbose:
            print(f"create {SIZES[i % len(SIZES)]:2d} CPUs: {creates[-1]:9.3f} ms, merge "
                  f"{sum(TIMES['merge'][n0:]):9.3f} ms, live {len(live)}", file=sys.stderr)
        await settle()
        if len(live) > args.live:
            p, c = live.pop(0)
            plugin.state_change(nri_pb2.StateChangeEvent(
                event=nri_pb2.REMOVE_CONTAINER, pod=p, container=c))
            await settle()
    take, merge = list(TIMES["take"]), list(TIMES["merge"])
    take_cpu, merge_cpu = list(CPU_TIMES["take"]), list(CPU_TIMES["merge"])
    plugin.close()

    plugin = new_plugin(POD_LEVEL, "podlevel")
    plugin.synchronize(pods, ctrs)
    await settle()
    pod_level: list[float] = []
    for i in range(args.creates // 4):
        p = nri_pod(f"pl{i}")
        r = p.linux.pod_resources
        r.cpu.shares.value = 8 * 1024
        r.cpu.quota.value = 8 * 100000
        r.cpu.period.value = 100000
        r.memory.limit.value = 8 * GiB
        main = nri_container(f"pl{i}", 4000, memory=4 * GiB)
        main.id, main.name = f"pl{i}-main", "main"
        main.labels["io.kubernetes.container.name"] = "main"
        side = nri_container(f"pl{i}", 0)
        side.id, side.name = f"pl{i}-side", "sidecar"
        side.labels["io.kubernetes.container.name"] = "sidecar"
        t = time.perf_counter()
        plugin.create_container(nri_pb2.CreateContainerRequest(pod=p, container=main))
        plugin.create_container(nri_pb2.CreateContainerRequest(pod=p, container=side))
        pod_level.append((time.perf_counter() - t) * 1e3)
        await settle()
        for c in (side, main):
            plugin.state_change(nri_pb2.StateChangeEvent(
                event=nri_pb2.REMOVE_CONTAINER, pod=p, container=c))
        plugin.state_change(nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_POD_SANDBOX, pod=p))
        await settle()
    plugin.close()

    print(f"large-768: {len(machine.topology.details)} CPUs, "
          f"{len(machine.topology.numa_nodes())} NUMA nodes, 1,000 containers; "
          f"best-effort, memoryManagerPolicy {'Static' if args.memory_static else 'None'}")
    print(f"  Synchronize of 1,000         {q(syncs)} ms")
    print(f"  CreateContainer (Guaranteed) {q(creates)} ms  ({refused} refused: full)")
    print(f"    take_by_topology           {q(take)} ms")
    print(f"      on a CPU                 {q(take_cpu)} ms")
    print(f"    Topology Manager merge     {q(merge)} ms")
    print(f"      on a CPU                 {q(merge_cpu)} ms")
    print(f"  load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"  pod-level pod (2 creates)    {q(pod_level)} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--creates", type=int, default=600)
    ap.add_argument("--syncs", type=int, default=5)
    ap.add_argument("--live", type=int, default=20,
                    help="Guaranteed containers kept before the oldest is removed")
    ap.add_argument("--memory-static", action="store_true",
                    help="memoryManagerPolicy Static (its hints: every NUMA mask, 65,535)")
    ap.add_argument("-v", "--verbose", action="store_true", help="every create on stderr")
    ap.add_argument("--fixture", type=Path, default=Path(tempfile.gettempdir()) / "nri-large-768",
                    help="where the fixture is written (kept for the next run)")
    args = ap.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # (the plugin's per-container lines)
    root = args.fixture / "large-768"
    if not (root / "sys").is_dir():
        write_machine(large_768(), args.fixture)
    work = Path(tempfile.mkdtemp(prefix="nri-large-", dir="/tmp"))
    instrument()
    try:
        asyncio.run(run(args, root, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
