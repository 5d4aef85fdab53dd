#!/usr/bin/env python3
"""What explanations cost on the hot path: CreateContainer with ``explainDecisions`` off and
on, in process (the real Stub and Plugin against the fake runtime, tests/unit/nri_peer.py),
on the 256-CPU machine of benchmarks/profile_hot_path.py, N running shared containers, then
Guaranteed 1-CPU and BestEffort containers created, stopped and removed one after another.
Rounds alternate off / on.

    .venv/bin/python benchmarks/explain_cost.py [--containers 100] [--creates 200] [--rounds 2]

Prints CreateContainer median and p99 (ms) per condition and the size of the explanations
file. Figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

TOP = Path(__file__).resolve().parent.parent
if str(TOP) not in sys.path:
    sys.path.insert(0, str(TOP))

from benchmarks.profile_hot_path import machine  # noqa: E402
from nri_cpumgr.api import nri_pb2  # noqa: E402
from nri_cpumgr.config import parse_config  # noqa: E402
from nri_cpumgr.runtime.plugin import EVENTS, Plugin  # noqa: E402
from nri_cpumgr.transport.stub import Stub  # noqa: E402
from tests.unit.nri_peer import FakeRuntime  # noqa: E402
from tests.unit.test_runtime_plugin import ctr, pod  # noqa: E402


async def one_round(plugin: Plugin, sock: Path, n: int, creates: int) -> dict[str, list[float]]:
    rt = FakeRuntime(sock)
    await rt.start()
    stub = Stub(plugin, name="cpumgr", idx="90", socket_path=str(sock), events=EVENTS)
    plugin.sender = stub.update_containers
    task = asyncio.create_task(stub.run())
    times: dict[str, list[float]] = {"Guaranteed": [], "BestEffort": []}
    try:
        conn = await rt.next_conn()
        await conn.handshake(pods=[pod(f"be{i}", "besteffort") for i in range(n)],
                             containers=[ctr(f"be{i}", 0, "0-255") for i in range(n)],
                             timeout=60)
        for i in range(creates):
            for kind, p, c in (("Guaranteed", pod(f"g{i}"), ctr(f"g{i}", 1000)),
                               ("BestEffort", pod(f"b{i}", "besteffort"), ctr(f"b{i}", 0))):
                req = nri_pb2.CreateContainerRequest(pod=p, container=c)
                t = time.perf_counter()
                await conn.call("CreateContainer", req, nri_pb2.CreateContainerResponse)
                times[kind].append((time.perf_counter() - t) * 1e3)
                await conn.call("StopContainer", nri_pb2.StopContainerRequest(pod=p, container=c),
                                nri_pb2.StopContainerResponse)
                await conn.call("StateChange", nri_pb2.StateChangeEvent(
                    event=nri_pb2.REMOVE_CONTAINER, pod=p, container=c), nri_pb2.Empty)
        await asyncio.sleep(0.3)  # let the last snapshot be written
    finally:
        stub.stop()
        await asyncio.wait_for(task, 5)
        await rt.stop()
    return times


def q(v: list[float]) -> str:
    s = sorted(v)
    return f"{statistics.median(s):.3f} / {s[int(len(s) * 0.99)]:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--containers", type=int, default=100)
    ap.add_argument("--creates", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    results: dict[bool, dict[str, list[float]]] = {
        False: {"Guaranteed": [], "BestEffort": []}, True: {"Guaranteed": [], "BestEffort": []}}
    size = 0
    for _ in range(args.rounds):
        for on in (False, True):
            wd = Path(tempfile.mkdtemp(prefix="nri-expl-", dir="/tmp"))
            try:
                cfg = parse_config(f'cpuManagerPolicy: static\nreservedSystemCPUs: "0"\n'
                                   f"stateDirectory: {wd}/state\nkubeletStateDirectory: ''\n"
                                   f"explainDecisions: {str(on).lower()}\n")
                plugin = Plugin(cfg, machine())
                t = asyncio.run(one_round(plugin, wd / "nri.sock", args.containers,
                                          args.creates))
                plugin.close()
                for k, v in t.items():
                    results[on][k] += v
                f = wd / "state" / "explanations"
                if on and f.exists():
                    size = f.stat().st_size
            finally:
                shutil.rmtree(wd, ignore_errors=True)
    print(f"CreateContainer, {args.containers} shared containers, {args.creates} creates of "
          f"each kind x {args.rounds} rounds (ms, median / p99):")
    print("| container | explainDecisions off | on |")
    print("|---|---|---|")
    for k in ("Guaranteed", "BestEffort"):
        print(f"| {k} | {q(results[False][k])} | {q(results[True][k])} |")
    print(f"explanations file after the last round (live containers only): {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
