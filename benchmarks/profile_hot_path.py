#!/usr/bin/env python3
"""Profile the plugin's hot path in process: the real Stub and Plugin against the fake
runtime (tests/unit/nri_peer.py) on a 256-CPU machine (2 sockets x 64 cores x 2 threads),
N running shared containers synchronized, then Guaranteed 1-CPU containers created, stopped
and removed one after another.

    .venv/bin/python benchmarks/profile_hot_path.py [--containers 1000] [--creates 300] [--profile]
    .venv/bin/python benchmarks/profile_hot_path.py --direct [--creates 3000] [--profile]

Prints Synchronize ms and CreateContainer / StopContainer median and p99 (ms); with
``--profile`` also the top functions by own time (cProfile) over the creates and stops.
``--direct``: no transport, the handlers called one after another on the event loop (what
the plugin's own Python costs, in us: create, stop, remove of a Guaranteed 1-CPU container,
the loop's deferred work run between them, untimed). Figures only: nothing is asserted.

The runtime introduces itself as containerd ``--runtime-version`` (default v2.4.2: the
shipped default ``sharedPoolUpdateMode: auto`` takes ``async`` there, as on a real node; the
transport mode's fake runtime says "fake 0.0", where ``auto`` takes ``reply``). ``--profile``
times the functions on the CPU (``time.process_time``: the checkpoint writer's thread is not
in it), not the wall clock, which a loaded machine inflates.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

from nri_cpumgr.api import nri_pb2  # noqa: E402
from nri_cpumgr.config import parse_config  # noqa: E402
from nri_cpumgr.runtime.plugin import EVENTS, Plugin  # noqa: E402
from nri_cpumgr.topology import CPUInfo, CPUTopology, Machine  # noqa: E402
from nri_cpumgr.transport.stub import Stub  # noqa: E402
from tests.unit.nri_peer import FakeRuntime  # noqa: E402
from tests.unit.test_runtime_plugin import ctr, pod  # noqa: E402

RUNTIME_VERSION = "v2.4.2"


def machine() -> Machine:
    """256 CPUs: CPU c is thread c // 128 of core c % 128; cores 0-63 on socket 0."""
    det = {c: CPUInfo((c % 128) // 64, (c % 128) // 64, c % 128) for c in range(256)}
    return Machine(CPUTopology.from_details(det))


def q(v: list[float]) -> str:
    s = sorted(v)
    return f"median {statistics.median(s):7.3f}  p99 {s[int(len(s) * 0.99)]:7.3f}"


async def bench(plugin: Plugin, sock: Path, n: int, creates: int,
                prof: cProfile.Profile | None) -> None:
    rt = FakeRuntime(sock)
    await rt.start()
    stub = Stub(plugin, name="cpumgr", idx="90", socket_path=str(sock), events=EVENTS)
    plugin.sender = stub.update_containers
    task = asyncio.create_task(stub.run())
    try:
        conn = await rt.next_conn()
        pods = [pod(f"be{i}", "besteffort") for i in range(n)]
        ctrs = [ctr(f"be{i}", 0, "0-255") for i in range(n)]
        t0 = time.perf_counter()
        await conn.handshake(pods=pods, containers=ctrs, timeout=30)
        sync = (time.perf_counter() - t0) * 1e3
        cr: list[float] = []
        st: list[float] = []
        for i in range(creates):
            req = nri_pb2.CreateContainerRequest(pod=pod(f"g{i}"), container=ctr(f"g{i}", 1000))
            if prof:
                prof.enable()
            t = time.perf_counter()
            await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
            cr.append((time.perf_counter() - t) * 1e3)
            sreq = nri_pb2.StopContainerRequest(pod=pod(f"g{i}"), container=ctr(f"g{i}"))
            t = time.perf_counter()
            await conn.call("StopContainer", sreq, nri_pb2.StopContainerResponse)
            st.append((time.perf_counter() - t) * 1e3)
            if prof:
                prof.disable()
            ev = nri_pb2.StateChangeEvent(event=nri_pb2.REMOVE_CONTAINER, pod=pod(f"g{i}"),
                                          container=ctr(f"g{i}"))
            await conn.call("StateChange", ev, nri_pb2.Empty)
        print(f"{n} shared containers: Synchronize {sync:.1f} ms (handshake included)")
        print(f"  CreateContainer  {q(cr)} ms")
        print(f"  StopContainer    {q(st)} ms")
    finally:
        stub.stop()
        await asyncio.wait_for(task, 5)
        await rt.stop()


async def direct(plugin: Plugin, n: int, creates: int, prof: cProfile.Profile | None) -> None:
    """The handlers without the transport (see the module docstring)."""

    async def sender(payload: bytes) -> set[str]:
        return set()

    plugin.sender = sender
    plugin.configure(nri_pb2.ConfigureRequest(runtime_name="containerd",
                                              runtime_version=RUNTIME_VERSION))
    plugin.synchronize([pod(f"be{i}", "besteffort") for i in range(n)],
                       [ctr(f"be{i}", 0, "0-255") for i in range(n)])
    for _ in range(5):
        await asyncio.sleep(0.01)
    times: dict[str, list[float]] = {"create": [], "stop": [], "remove": []}
    for i in range(creates):
        p, c = pod(f"g{i}"), ctr(f"g{i}", 1000)
        calls = (("create", plugin.create_container, nri_pb2.CreateContainerRequest(
                     pod=p, container=c)),
                 ("stop", plugin.stop_container, nri_pb2.StopContainerRequest(
                     pod=p, container=c)),
                 ("remove", plugin.state_change, nri_pb2.StateChangeEvent(
                     event=nri_pb2.REMOVE_CONTAINER, pod=p, container=c)))
        for name, fn, req in calls:
            if prof:
                prof.enable()
            t = time.perf_counter()
            fn(req)  # type: ignore[operator]
            times[name].append((time.perf_counter() - t) * 1e6)
            if prof:
                prof.disable()
            for _ in range(3):  # the deferred work (logging, pool sync, checkpoint timer)
                await asyncio.sleep(0)
    for name, v in times.items():
        s = sorted(v)
        print(f"{n} shared containers, {name:6s} median {statistics.median(s):7.1f} us  "
              f"p99 {s[int(len(s) * 0.99)]:7.1f} us")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, default=1000)
    ap.add_argument("--creates", type=int, default=300)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--direct", action="store_true", help="the handlers without the transport")
    ap.add_argument("--runtime-version", default=RUNTIME_VERSION,
                    help="containerd version in --direct's Configure (default %(default)s)")
    args = ap.parse_args()
    globals()["RUNTIME_VERSION"] = args.runtime_version
    wd = Path(tempfile.mkdtemp(prefix="nri-prof-", dir="/tmp"))
    try:
        cfg = parse_config(f'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'
                           f"stateDirectory: {wd}/state\n")
        plugin = Plugin(cfg, machine())
        prof = cProfile.Profile(time.process_time) if args.profile else None
        if args.direct:
            asyncio.run(direct(plugin, args.containers, args.creates, prof))
        else:
            asyncio.run(bench(plugin, wd / "nri.sock", args.containers, args.creates, prof))
        plugin.close()
        if prof:
            pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    finally:
        shutil.rmtree(wd, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
